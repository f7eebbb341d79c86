"""Recovery's CPU on a recorded run: reading what its consumer is sent, handling it and its
ageing tick, replayed deterministically.

Reads an event log saved by ``bench/kueue_scheduler.py --save-events FILE`` and keeps the
events this checkout's recovery is sent (its consumer's subjects with no managed job under
way). It packs them as the publishers do (each run of one family one batch message, JSON
array; ``--take`` messages per take, as a consumer's pull), reads each take as the bus does
(``decode_batch`` through the consumer's view: decoding, ids taken) and hands it to
``RecoveryService._on_events``; at every second of the log's time it runs the ageing tick
(``_publish_boosts``). Prints the CPU of reading, handling and ticking, and a digest of the
waits at the end and of what it announced. Run it from two checkouts with the same log to
compare code versions on the same input (the live benchmark's CPU varies with load).

    .venv/bin/python bench/kueue_scheduler.py --config large-scale --save-events /tmp/large.jsonl
    .venv/bin/python bench/recovery_replay.py /tmp/large.jsonl --config large-scale
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
from services.recovery import service as recovery
from shared.bus.batches import BatchView
from shared.bus.pulling import decode_batch, handling_chunks
from shared.config import object_key, parse_object
from shared.events import AnyEvent, Event, decode_event, encode_event, subject_for
from shared.gc_tuning import tune_gc
from shared.logging import configure_logging
from shared.service import Runtime
from shared.subjects import (
    batched_filters,
    publisher_batch_subjects,
    subject_family,
    subject_matcher,
)


def _subjects() -> list[str]:
    """What this checkout's recovery consumer is sent with no managed job under way."""
    subjects_for = getattr(recovery, "subjects_for", None)
    if subjects_for is None:
        return list(getattr(recovery, "SUBJECTS"))  # a checkout from before subjects_for  # noqa: B009
    try:
        return list(subjects_for([], batching=True))
    except TypeError:  # a checkout from before its pending reports were narrowed
        return list(subjects_for([]))


def packed_takes(events: list[AnyEvent], subjects: list[str], take: int) -> list[list[Msg]]:
    """The log cut in pieces of ``take`` events (whatever the subjects: so two checkouts
    tick at the same points), each piece the batch messages of the events kept (a run of
    one batch subject is one batch). Kept as a consumer of ``subjects`` is sent them with
    batches on: a batch subject its filters match, and in it the events it wants."""
    filters, twins = batched_filters(subjects)
    sent, wanted = subject_matcher(filters), subject_matcher(subjects)
    by_source: dict[str, dict[str, str]] = {}  # publisher -> family -> its batches' subject
    takes: list[list[Msg]] = []
    for start in range(0, len(events), take):
        messages: list[Msg] = []
        on, run = "", list[bytes]()
        for event in [*events[start : start + take], None]:
            subject = "" if event is None else subject_for(event)
            at = "" if event is None else _batch_subject_of(event, subject, by_source)
            if event is not None and not (sent(at) and (twins.get(at) or wanted(subject))):
                continue
            if event is None or at != on:
                if run:
                    data = b"[" + b",".join(run) + b"]"
                    messages.append(Msg(cast(Any, None), subject=on, data=data))
                if event is None:
                    break
                on, run = at, []
            run.append(encode_event(event))
        takes.append(messages)
    return takes


def _batch_subject_of(
    event: AnyEvent, subject: str, by_source: dict[str, dict[str, str]]
) -> str:
    """The subject of the batch its publisher sends ``event`` in ("": no batched family's,
    not among what the replayed consumers are sent); each publisher's map made once."""
    subjects = by_source.get(event.source)
    if subjects is None:
        subjects = by_source[event.source] = publisher_batch_subjects(event.source)
    return subjects.get(subject_family(subject), "")


def _policy(reserve_after: float) -> dict[str, Any]:
    """The default ClusterQueuePolicy with ``reserveAfter`` (seconds) and a boost."""
    ageing = {"priorityPerMinute": 600, "reserveAfter": f"{reserve_after:g}s"}
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "ClusterQueuePolicy",
        "metadata": {"name": "default"},
        "spec": {"ageing": ageing},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="events, one JSON per line")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="large-scale")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--take", type=int, default=512, help="log events per pull")
    parser.add_argument(
        "--reserve-after",
        type=float,
        default=None,
        help="seconds: a default ClusterQueuePolicy with this reserveAfter, so waits age",
    )
    args = parser.parse_args(argv)
    config = CONFIGS[args.config]
    if args.scale != 1.0:
        config = config.scaled(args.scale)
    events = [decode_event(line) for line in args.log.read_bytes().splitlines() if line]
    subjects = _subjects()
    takes = packed_takes(events, subjects, args.take)
    announced = hashlib.sha256()

    kept: list[Event] = []  # what it published, digested after the replay

    async def publish_many(published: list[Event]) -> None:
        kept.extend(published)

    async def put(key: str, value: bytes) -> int:
        return 0

    service = recovery.RecoveryService(
        cast(Runtime, SimpleNamespace(bus=SimpleNamespace(publish_many=publish_many)))
    )
    service.kv = cast(Any, SimpleNamespace(put=put))
    documents = list(config_documents(config))
    if args.reserve_after is not None:
        documents.append(_policy(args.reserve_after))
    objects = [parse_object(d) for d in documents]
    service.config.objects = {object_key(o): o for o in objects}
    view = BatchView.of(subjects, batching=True)
    gc.freeze()  # the log is input, not the service's state
    tune_gc()  # as every service (shared/service.py)
    read_s = handle_s = tick_s = 0.0
    count = 0
    tick_at = events[0].time.timestamp() + 1.0
    waits = hashlib.sha256()  # every wait at every tick (outside the CPU counted)

    async def replay() -> None:
        nonlocal read_s, handle_s, tick_s, count, tick_at
        for number, messages in enumerate(takes):
            began = time.process_time()
            taken = decode_batch(messages, batches=view)
            read_s += time.process_time() - began
            count += len(taken)
            began = time.process_time()
            for chunk in handling_chunks(taken):
                await service._on_events(chunk)
            handle_s += time.process_time() - began
            now = events[min(len(events), (number + 1) * args.take) - 1].time.timestamp()
            while now >= tick_at:
                began = time.process_time()
                await service._publish_boosts(tick_at)
                tick_s += time.process_time() - began
                tick_at += 1.0
                for uid, wait in sorted(service.waits.waits.items()):
                    state = (uid, wait.cluster_queue, wait.running, wait.since, wait.boost)
                    waits.update(repr(state).encode())

    # Its log lines as the service writes them (JSON), to /dev/null: their cost is counted.
    saved, sink = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 2)
    try:
        configure_logging(service="recovery")
        asyncio.run(replay())
    finally:
        os.dup2(saved, 2)
        os.close(sink)
        os.close(saved)
    for event in kept:  # what it says, not when (an event's time is the clock's)
        said = {k: v for k, v in msgspec.structs.asdict(event).items() if k != "time"}
        announced.update(repr(said).encode())
    print(f"{len(events):,} events from {args.log} ({args.config} x{args.scale:g});"
          f" recovery is sent {count:,} of them ({', '.join(subjects)})")  # fmt: skip
    per = 1e6 / max(1, count)
    print(f"read:   {read_s:.2f} s CPU ({read_s * per:.2f} us per event sent)")
    print(f"handle: {handle_s:.2f} s CPU ({handle_s * per:.2f} us per event sent)")
    print(f"ticks:  {tick_s:.2f} s CPU")
    print(f"total:  {read_s + handle_s + tick_s:.2f} s CPU")
    print(f"waits digest (every wait at every tick): {waits.hexdigest()[:12]};"
          f" announced digest {announced.hexdigest()[:12]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
