"""The local watcher's own Python per workload, in process: each workload's object read from
a watch batch and announced, its admission started as a simulated run (Running status,
Started; no PodsReady, as waitForPodsReady is off by default), its finish reported
(Finished, the terminal status), through the
real ``LocalBackend`` and its parts, with a stand-in bus that acks every publish and key
update at once.

    .venv/bin/python bench/watcher_path.py                 # 20,000 workloads, 5 rounds
    .venv/bin/python bench/watcher_path.py --workloads 5000 --rounds 3

Prints the CPU time (process time) per workload of each round and their median, and a
digest of everything the watcher sent (event types and ids, status records without their
``updated`` time, the log lines' events and workloads): equal digests, the same output.

Caveats printed beside the figures: the stand-in bus does none of the real bus's work
(encoding, batches and copies, acks, nats-py, the socket), so this measures only the
watcher's own code (services/watcher) and what it calls in shared/ besides the bus; a change
that sent more or fewer messages would look cheaper or dearer here than it is. The inputs (objects,
entries, decisions) are frozen out of the garbage collector before the clock starts, which is
set as a service sets it (shared/gc_tuning.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
from nats.js.kv import KeyValue

import shared.logging as berth_logging
from bench.objects import simulated_job
from services.watcher.local.backend import LocalBackend
from shared.events import Event, FlavorAssignment, WorkloadAdmitted
from shared.gc_tuning import tune_gc
from shared.service import Runtime

BATCH = 100  # objects per watch batch, admissions per batch of decisions


class _Sent:
    async def settle(self) -> None:
        return None


class _Updates:
    def __init__(self, count: int) -> None:
        self.count = count

    async def outcomes(self) -> list[int | Exception]:
        return [1] * self.count


class StandInBus:
    """Acks everything at once; keeps what it was given (for the digest, made afterwards)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.updates: list[tuple[str, bytes]] = []

    async def publish(self, event: Event) -> None:
        self.events.append(event)

    async def publish_many(self, events: Any) -> None:
        self.events.extend(events)

    async def send_many(self, events: Any) -> _Sent:
        self.events.extend(events)
        return _Sent()

    async def send_key_batch(self, kv: Any, puts: Any) -> _Updates:
        self.updates.extend(puts)
        return _Updates(len(puts))

    async def send_key_updates(self, kv: Any, updates: Any) -> _Updates:
        self.updates.extend((key, value) for key, value, _ in updates)
        return _Updates(len(updates))


class _Lines(list[bytes]):
    """The log's file: its writes kept for the digest."""

    def write(self, data: bytes) -> int:
        self.append(data)
        return len(data)

    def flush(self) -> None:
        return None


def digest_of(bus: StandInBus, lines: _Lines) -> str:
    """What was sent and logged, in any order (rounds of finishes end as the clock has it):
    each event's type and id, each status record but its ``updated`` time, each log line's
    fields but its timestamp."""
    items = [f"{type(event).__name__} {event.id}" for event in bus.events]
    for key, value in bus.updates:
        status = msgspec.json.decode(value)
        status.pop("updated", None)
        items.append(key + msgspec.json.encode(status).decode())
    for line in b"".join(lines).splitlines():
        fields = msgspec.json.decode(line)
        fields.pop("timestamp", None)
        items.append(msgspec.json.encode(fields).decode())
    return hashlib.sha256("\n".join(sorted(items)).encode()).hexdigest()[:16]


def _admitted(obj: dict[str, Any]) -> WorkloadAdmitted:
    metadata = obj["metadata"]
    from services.watcher.reporting import ref_of

    return WorkloadAdmitted(
        source="admission",
        workload=ref_of(obj),
        cluster_queue=f"cq-{metadata['namespace']}",
        local_queue=metadata["namespace"],
        priority=0,
        assignments=[
            FlavorAssignment(pod_set="main", count=1, flavors={"cpu": "default"}, usage={})
        ],
        generation=1,
    )


async def one_round(workloads: int, data_dir: str) -> tuple[float, str, int, int]:
    bus = StandInBus()
    runtime = Runtime(name="watcher", bus=bus, data_dir=data_dir)  # type: ignore[arg-type]
    backend = LocalBackend(runtime, stop_grace=1.0)
    backend.store.open(bus, object(), runtime.stopping)  # type: ignore[arg-type]
    berth_logging._LINES.flush()
    lines = _Lines()
    berth_logging._LINES.file = lines  # type: ignore[assignment]
    objects = [
        simulated_job(f"job-{i}", f"ns-{i % 10}", 0, uid=f"uid-{i:08d}") for i in range(workloads)
    ]
    entries = [
        KeyValue.Entry(
            "berth-objects",
            f"{obj['metadata']['namespace']}.{obj['metadata']['name']}",
            msgspec.json.encode(obj),
            i + 1,
            0,
            None,
            None,
        )
        for i, obj in enumerate(objects)
    ]
    decisions = [_admitted(obj) for obj in objects]
    finisher = runtime.spawn(backend.runs.finishes.report_simulated(), name="finishes")
    gc.collect()
    gc.freeze()  # the inputs made here are not the watcher's: its collector never scans them
    started = time.process_time()
    for at in range(0, workloads, BATCH):
        await backend._observe_changes(entries[at : at + BATCH])
        settling = await backend._on_decisions(list(decisions[at : at + BATCH]))
        if settling is not None:
            await settling
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)  # every clock rings (each run ends within 1 ms of its start)
    backend.runs.finishes.close()
    await finisher
    assert not backend.runs.running, "a run left unfinished"
    await asyncio.sleep(0)
    elapsed = time.process_time() - started
    gc.unfreeze()
    berth_logging._LINES.flush()
    return elapsed, digest_of(bus, lines), len(bus.events), len(bus.updates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    berth_logging.configure_logging(service="watcher")
    tune_gc()  # as every service sets its collector (shared/gc_tuning.py)
    figures = []
    with tempfile.TemporaryDirectory(prefix="berth-watcher-path-") as tmp:
        for number in range(args.rounds):
            elapsed, digest, events, updates = asyncio.run(one_round(args.workloads, tmp))
            per = elapsed / args.workloads * 1e6
            figures.append(per)
            print(
                f"round {number + 1}: {per:6.2f} us CPU per workload "
                f"({events / args.workloads:.0f} events, {updates / args.workloads:.0f} status"
                f" writes each; digest {digest})"
            )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"median {statistics.median(figures):.2f}, best {min(figures):.2f} us CPU per workload"
        f" (load {load})"
    )
    print(
        "caveat: a stand-in bus acks at once and does none of the real bus's work (encoding,"
        " batches, copies, nats-py, the socket): only the watcher's own code is measured"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
