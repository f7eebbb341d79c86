"""Preemption's CPU on a recorded run: its fold and its searches, replayed deterministically.

Reads an event log saved by ``bench/kueue_scheduler.py --save-events FILE`` and folds it
into preemption's Cluster in batches of ``--batch`` (as the service reads the stream); after
each batch it runs ``decide`` for every preemptor whose request arrived in that batch (what
the service does when one is due), at the time of the batch's last event. The decisions are
not published: the log holds the live run's own. Prints the CPU of the fold and of the
searches, and a digest of the decisions. Run it from two checkouts with the same log to
compare code versions on exactly the same input (the live benchmark's preemption CPU varies
with timing and load).

With ``--service`` it replays through the service itself instead: each take of ``--batch``
log events packed as the publishers do (one batch message per run of a family) and read as
its consumer does (``decode_batch`` through its view), folded by ``PreemptionService._fold``
piece by piece (``handling_chunks``) and followed by ``_evaluate_due`` with the service's
clock at the take's last event: so the read, the fold's per-event steps, the evaluation of
every due preemptor (metrics and log lines included) are all counted, each event decoded
just before it is folded, as live. It prints the CPU of each, and a digest of what the
service published (ids and times left out).

    .venv/bin/python bench/kueue_scheduler.py --config large-scale --save-events /tmp/large.jsonl
    .venv/bin/python bench/preemption_replay.py /tmp/large.jsonl --config large-scale
    .venv/bin/python bench/preemption_replay.py /tmp/large.jsonl --config large-scale --service
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

if __package__ in (None, ""):  # run as a script: make `bench`, `services`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
from nats.aio.msg import Msg

from bench.kueue_config import CONFIGS
from bench.kueue_drive import config_documents
from bench.recovery_replay import packed_takes
from services.preemption import service as preemption
from services.preemption.cluster import Cluster
from services.preemption.deciding import Decision, decide
from shared.bus.batches import BatchView
from shared.bus.pulling import decode_batch, handling_chunks
from shared.config import ConfigObject, parse_object
from shared.events import AnyEvent, Event, WorkloadPending, decode_event
from shared.gc_tuning import tune_gc
from shared.logging import configure_logging
from shared.service import Runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="events, one JSON per line")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="large-scale")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=256, help="events per fold")
    parser.add_argument(
        "--service", action="store_true", help="through the service's read, fold and evaluation"
    )
    parser.add_argument("--repeat", type=int, default=1, help="--service: replays, least kept")
    args = parser.parse_args(argv)
    config = CONFIGS[args.config]
    if args.scale != 1.0:
        config = config.scaled(args.scale)
    events: list[AnyEvent] = [
        decode_event(line) for line in args.log.read_bytes().splitlines() if line
    ]
    objects = [parse_object(d) for d in config_documents(config)]
    if args.service:
        return _through_service(events, objects, args)
    gc.freeze()  # the log is input, not the service's state: no collection scans it
    cluster = Cluster()
    cluster.set_config(objects)
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


def _subjects() -> list[str]:
    """What this checkout's preemption consumer is sent with batches on."""
    folded_subjects = getattr(preemption, "folded_subjects", None)
    if folded_subjects is None:  # a checkout from before its pending reports were narrowed
        return list(preemption.FOLDED_SUBJECTS)
    return list(folded_subjects(True))


def _through_service(
    events: list[AnyEvent], objects: list[ConfigObject], args: argparse.Namespace
) -> int:
    """The replay through ``PreemptionService`` (``--service``), ``--repeat`` times, each on
    a new service: the least CPU of each part is printed (other work on the machine only
    adds to a figure), with the digest of what each replay published."""
    # Each piece of ``--batch`` log events packed as the publishers do, with its last
    # event's time (the service's clock when it has been read).
    packed = packed_takes(events, _subjects(), args.batch)
    times = [events[min(len(events), start + args.batch) - 1].time.timestamp()
             for start in range(0, len(events), args.batch)]  # fmt: skip
    takes = list(zip(packed, times, strict=True))
    gc.freeze()  # the log is input, not the service's state
    tune_gc()  # as every service (shared/service.py)
    best: dict[str, float] = {}
    digests: set[str] = set()
    count = published = 0
    # Its log lines as the service writes them (JSON), to /dev/null: their cost is counted.
    saved, sink = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 2)
    try:
        configure_logging(service="preemption")
        for _ in range(args.repeat):
            figures, digest, count, published = _one_service_replay(takes, objects)
            best = {k: min(v, best.get(k, v)) for k, v in figures.items()}
            digests.add(digest)
            gc.collect()
    finally:
        os.dup2(saved, 2)
        os.close(sink)
        os.close(saved)
    per = 1e6 / max(1, count)
    print(f"{len(events):,} events from {args.log} ({args.config} x{args.scale:g});"
          f" preemption reads {count:,} of them, through the service"
          f" (least of {args.repeat})")  # fmt: skip
    print(f"read:     {best['read']:.3f} s CPU ({best['read'] * per:.2f} us per event read)")
    print(f"fold:     {best['fold']:.3f} s CPU ({best['fold'] * per:.2f} us per event read)")
    print(f"evaluate: {best['evaluate']:.3f} s CPU")
    print(f"total:    {best['total']:.3f} s CPU")
    print(f"published {published:,} events; digest {', '.join(sorted(digests))}")
    return 0


def _one_service_replay(
    takes: list[tuple[list[Msg], float]], objects: list[ConfigObject]
) -> tuple[dict[str, float], str, int, int]:
    """One replay on a new service: CPU per part, the digest of what it published (ids and
    times left out), events read, events published."""
    published: list[Event] = []

    async def publish_many(outgoing: list[Event]) -> None:
        published.extend(outgoing)

    runtime = SimpleNamespace(bus=SimpleNamespace(publish_many=publish_many))
    service = preemption.PreemptionService(cast(Runtime, runtime))
    service.cluster.set_config(objects)
    clock = [takes[0][1]]
    # The service's clock is the log's: due times, retries and protections as in the run.
    preemption.time = cast(  # type: ignore[attr-defined]
        Any,
        SimpleNamespace(
            time=lambda: clock[0], monotonic=lambda: clock[0], perf_counter=time.perf_counter
        ),
    )
    view = BatchView.of(_subjects(), batching=True)
    figures = {"read": 0.0, "fold": 0.0, "evaluate": 0.0}
    count = 0

    async def replay() -> None:
        nonlocal count
        for messages, at in takes:
            clock[0] = at
            began = time.process_time()
            taken = decode_batch(messages, batches=view)
            figures["read"] += time.process_time() - began
            count += len(taken)
            for chunk in handling_chunks(taken):
                began = time.process_time()
                service._fold(chunk, live=True)
                figures["fold"] += time.process_time() - began
                began = time.process_time()
                await service._evaluate_due()
                figures["evaluate"] += time.process_time() - began

    asyncio.run(replay())
    figures["total"] = sum(figures.values())
    said = hashlib.sha256()
    for event in published:  # what it says, not when or under which id
        fields = msgspec.structs.asdict(event)
        said.update(repr({k: v for k, v in fields.items() if k not in ("id", "time")}).encode())
    return figures, said.hexdigest()[:12], count, len(published)


if __name__ == "__main__":
    raise SystemExit(main())
