"""Preemption's CPU on a recorded run: its fold and its searches, replayed deterministically.

Reads an event log saved by ``bench/kueue_scheduler.py --save-events FILE`` and folds it
into preemption's Cluster in batches of ``--batch`` (as the service reads the stream); after
each batch it runs ``decide`` for every preemptor whose request arrived in that batch (what
the service does when one is due), at the time of the batch's last event. The decisions are
not published: the log holds the live run's own. Prints the CPU of the fold and of the
searches, and a digest of the decisions. Run it from two checkouts with the same log to
compare code versions on exactly the same input (the live benchmark's preemption CPU varies
with timing and load).

    .venv/bin/python bench/kueue_scheduler.py --config large-scale --save-events /tmp/large.jsonl
    .venv/bin/python bench/preemption_replay.py /tmp/large.jsonl --config large-scale
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `services`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kueue_config import CONFIGS
from bench.kueue_scheduler import config_documents
from services.preemption.cluster import Cluster
from services.preemption.deciding import Decision, decide
from shared.config import parse_object
from shared.events import AnyEvent, WorkloadPending, decode_event


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="events, one JSON per line")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="large-scale")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=256, help="events per fold")
    args = parser.parse_args(argv)
    config = CONFIGS[args.config]
    if args.scale != 1.0:
        config = config.scaled(args.scale)
    events: list[AnyEvent] = [
        decode_event(line) for line in args.log.read_bytes().splitlines() if line
    ]
    gc.freeze()  # the log is input, not the service's state: no collection scans it
    cluster = Cluster()
    cluster.set_config(parse_object(d) for d in config_documents(config))
    fold_s = search_s = 0.0
    searches = with_victims = silent = 0
    digest = hashlib.sha256()
    outcomes = hashlib.sha256()  # victims, message and retry time: the whole decision
    for start in range(0, len(events), args.batch):
        batch = events[start : start + args.batch]
        began = time.process_time()
        asked: list[str] = []
        for event in batch:
            cluster.apply(event)
            if isinstance(event, WorkloadPending) and event.workload.uid in cluster.waiting:
                asked.append(event.workload.uid)
        fold_s += time.process_time() - began
        wall = batch[-1].time.timestamp()
        began = time.process_time()
        for uid in dict.fromkeys(asked):
            decision = decide(cluster, uid, wall)
            searches += 1
            with_victims += bool(decision.victims)
            # Nothing to say: it fits by now (admission's report of a contested need was
            # stale when read), or the evictions ordered for it are still leaving.
            silent += decision == Decision()
            victims = [(v.workload.ref.uid, v.reason) for v in decision.victims]
            digest.update(repr([uid for uid, _ in victims]).encode())
            outcomes.update(repr((uid, victims, decision.message, decision.retry_at)).encode())
        search_s += time.process_time() - began
    print(f"{len(events):,} events from {args.log} ({args.config} x{args.scale:g})")
    print(f"fold:     {fold_s:.2f} s CPU ({fold_s / len(events) * 1e6:.1f} us per event)")
    print(
        f"searches: {search_s:.2f} s CPU for {searches:,} ({with_victims:,} with victims,"
        f" {silent:,} silent: it fits by then, or its evictions are leaving; {search_s / max(1, searches) * 1e6:.0f} us each)"
    )
    print(f"decisions digest: {digest.hexdigest()[:12]}")
    print(f"outcomes digest (reasons, messages, retry times too): {outcomes.hexdigest()[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
