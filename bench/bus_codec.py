"""What the bus layer costs per event in the consuming and publishing process's CPU
(issue 20): reading batches (shared/bus/batches.py ``expand`` via ``decode_batch``),
publishing a round as batches with their per-workload copies (``Publishing.send_many``), and
one structlog line (shared/logging.py).

    .venv/bin/python bench/bus_codec.py [--events 512] [--rounds 40] [--takes 300]

Prints µs of this process's CPU per event (per line for the log), best of ``--repeat``
passes, for: a batch read whole (admission's fold), a batch picked inside by pattern (a
ClusterQueue's decisions), a batch picked by a service's own ``keep`` (recovery), batches
read in a row by one consumer (its recent ids full), a round published by a bus holding a
lease term (prepare, batch, copies, acks; against a private nats-server), and a log line
(to /dev/null). Speed only: tests/test_bus_batches_*.py prove the behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
from nats.aio.msg import Msg

from berth_cli.natsserver import NatsServer
from shared.auth import ClientAuth
from shared.bus import Bus
from shared.bus.batches import BatchView
from shared.bus.pulling import ReadCounts, decode_batch
from shared.bus.settings import BusSettings
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadRef,
    encode_event,
    new_event_id,
)
from shared.fencing import Fence
from shared.logging import configure_logging, get_logger


def admitted(index: int, run: int = 0) -> WorkloadAdmitted:
    """An admission as the large-scale run publishes them (one pod set, two resources)."""
    return WorkloadAdmitted(
        id=f"{new_event_id()}-{run}",
        source="admission",
        workload=WorkloadRef(f"team-{index % 50}", f"job-{index}", f"uid-{index}"),
        cluster_queue=f"cq-{index % 1000}",
        local_queue="lq",
        priority=0,
        generation=1,
        assignments=[
            FlavorAssignment(
                "main", 1, {"cpu": "default", "memory": "default"}, {"cpu": 1000, "memory": 10**9}
            )
        ],
    )


def batch_messages(count: int, run: int) -> list[Msg]:
    """One batch of ``count`` admissions as it arrives (built by hand, as shared/bus/batches.py
    does, so that the script also runs on a tree from before it)."""
    payload = b"[" + b",".join(encode_event(admitted(i, run)) for i in range(count)) + b"]"
    return [Msg(None, subject="berth.b.cq.admitted", data=payload)]  # type: ignore[arg-type]


def screen_us(events: int, repeat: int) -> None:
    """CPU µs per event of the fence's screen over a batch (every event stands)."""
    batch = msgspec.json.decode(batch_messages(events, 0)[0].data, type=list[AnyEvent])
    fence = Fence({"admission": 0, "watcher": 3})
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        fence.screen(batch)
        best = min(best, time.process_time() - started)
    print(f"{'screen a batch (fence)':<44} {best / events * 1e6:7.2f} µs/event")


def per_event_us(
    label: str,
    events: int,
    repeat: int,
    patterns: list[str],
    keep: Callable[[str], bool] | None,
) -> None:
    """Best-of CPU µs per event for ``decode_batch`` of one batch of ``events``."""
    best = float("inf")
    kept = 0
    for run in range(repeat):
        messages = batch_messages(events, run)
        view = BatchView.of(patterns, batching=True)
        counts = ReadCounts()
        started = time.process_time()
        out = decode_batch(messages, keep, None, counts, view)
        best = min(best, time.process_time() - started)
        kept = len(out)
    print(f"{label:<44} {best / events * 1e6:7.2f} µs/event   kept {kept}/{events}")


def steady_us(events: int, takes: int) -> None:
    """CPU µs per event for ``decode_batch`` of batches in a row through one view, as a
    service's consumer reads them: past the first takes it remembers RECENT_IDS event ids
    (shared/bus/batches.py ``RecentIds``) and forgets the oldest at every take."""
    view = BatchView.of(["berth.cq.*.admitted.>"], batching=True)
    batches = [batch_messages(events, run) for run in range(takes)]
    started = time.process_time()
    for messages in batches:
        decode_batch(messages, None, None, ReadCounts(), view)
    spent = time.process_time() - started
    label = f"read {takes} batches in a row (one view)"
    print(f"{label:<44} {spent / (events * takes) * 1e6:7.2f} µs/event")


async def publishing(url: str, events: int, rounds: int) -> None:
    bus = await Bus.connect(
        url, source="admission", auth=ClientAuth(), retry=False, settings=BusSettings(batching=True)
    )
    bus.term = 2  # as a service holding its lease: every event stamped with the term
    try:
        await bus.ensure_stream()
        best = float("inf")
        for run in range(rounds):
            round_ = [admitted(index, run) for index in range(events)]
            started = time.process_time()
            sent = await bus.send_many(round_)
            await sent.settle()
            best = min(best, time.process_time() - started)
        label = "publish a round (batch + copies + acks)"
        print(f"{label:<44} {best / events * 1e6:7.2f} µs/event")
        kv = await bus.kv("bench-statuses")
        best = float("inf")
        for _ in range(rounds):
            updates = [(f"k{index}", b'{"phase":"Running"}' * 10, None) for index in range(events)]
            started = time.process_time()
            await (await bus.send_key_updates(kv, updates)).outcomes()
            best = min(best, time.process_time() - started)
        label = "key updates without a swap (statuses)"
        print(f"{label:<44} {best / events * 1e6:7.2f} µs/update")
    finally:
        await bus.close()


def log_line_us(lines: int) -> None:
    """CPU µs of one structlog line, written to /dev/null."""
    saved = os.dup(2)
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 2)
    try:
        configure_logging(service="bench")
        log = get_logger("bench")
        started = time.process_time()
        for index in range(lines):
            log.info("admitted", workload=f"team/job-{index}", queue="cq-1", reason="fits")
        spent = time.process_time() - started
    finally:
        os.dup2(saved, 2)
        os.close(sink)
        os.close(saved)
    print(f"{'one log line':<44} {spent / lines * 1e6:7.2f} µs/line")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=512, help="events per batch / round")
    parser.add_argument("--repeat", type=int, default=40, help="passes; the best is printed")
    parser.add_argument("--rounds", type=int, default=40, help="rounds published")
    parser.add_argument("--takes", type=int, default=300, help="batches read in a row")
    args = parser.parse_args()
    per_event_us("read a batch whole", args.events, args.repeat, ["berth.cq.*.admitted.>"], None)
    per_event_us(
        "read a batch picked inside by pattern",
        args.events,
        args.repeat,
        ["berth.cq.cq-1.>", "berth.cq.cq-2.>"],
        None,
    )
    per_event_us(
        "read a batch picked by keep(subject)",
        args.events,
        args.repeat,
        ["berth.cq.*.admitted.>"],
        lambda subject: subject.endswith("0"),
    )
    steady_us(args.events, args.takes)
    screen_us(args.events, args.repeat)
    with tempfile.TemporaryDirectory() as store, NatsServer(store_dir=Path(store)) as server:
        asyncio.run(publishing(server.url, args.events, args.rounds))
    log_line_us(20_000)


if __name__ == "__main__":
    main()
