"""Admission's per-workload work outside the scheduler core, without the bus.

The admission service's fold (``_apply``) and its decision loop (``_decide``: one scheduling
pass, then each decision turned into its event, record update, metrics and log line, and
its own admissions folded back; then the loop's turn: due evictions, the admission checks'
and pods-ready clocks) driven in one process: 200 ClusterQueues in 10 cohorts
(bench/admission_core.py's world), workloads submitted in batches of 500, each batch
followed by one pass; the pods of what the last pass admitted become ready, half of what
runs finishes (``--batch``: more per batch, deeper queues, more waiting decisions). The bus
is a sink that keeps what ``_decide`` publishes; the log lines are written, to /dev/null;
the garbage collector is set as every service sets it (shared/gc_tuning.py).
Prints CPU seconds (process time) of the fold and of the decisions,
the core's ``schedule()`` apart, per workload, the waiting (Inadmissible) decisions, and a
digest of every published decision in order (a change outside the core must leave it as it
was). Run:

    .venv/bin/python bench/admission_fold.py [--workloads 20000] [--repeat 3] [--batch 500]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.admission_core import build_config
from bench.admission_stub import Acked, runtime_for, turn
from services.admission.model import Decision, Inadmissible
from services.admission.service import AdmissionService
from shared.events import (
    AnyEvent,
    Event,
    PodSet,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadPodsReady,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.gc_tuning import tune_gc
from shared.logging import configure_logging

CLUSTER_QUEUES = 200
BATCH = 500


class Sink:
    """The bus as the admission service uses it: what it sends, kept (a digest of it, in order)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.admitted: list[WorkloadAdmitted] = []

    async def send_many(self, events: Sequence[Event]) -> Acked:
        """What admission's outbox sends: kept as published, its acks in at once."""
        for event in events:
            if isinstance(event, WorkloadAdmitted):
                self.admitted.append(event)
                line = f"A {event.workload.uid} {event.cluster_queue} {event.generation}"
            elif isinstance(event, WorkloadPending):
                line = f"P {event.workload.uid} {event.reason} {event.message}"
            else:
                line = f"{type(event).__name__} {event.workload.uid}"
            self.digest.update(line.encode() + b"\n")
        return Acked()


def run(workloads: int, batch_size: int) -> tuple[float, float, float, str, int, int]:
    """(fold s, decisions s, of which schedule() s, digest, admitted, waiting decisions)."""
    rng = random.Random(7)
    sink = Sink()
    service = AdmissionService(runtime_for(sink))
    # The throttle's held reports go out by the clock, which the digest must not depend on.
    service.pending_throttle.interval = float("inf")
    config = build_config(CLUSTER_QUEUES)
    service.scheduler.set_config(config)
    service.gates.set_config(config)
    service.deciding = True
    core_s = 0.0
    schedule = service.scheduler.schedule

    waited = 0  # Inadmissible decisions: the workloads a pass found waiting

    def timed_schedule() -> list[Decision]:
        nonlocal core_s, waited
        started = time.process_time()
        decisions = schedule()
        core_s += time.process_time() - started
        waited += sum(isinstance(d, Inadmissible) for d in decisions)
        return decisions

    service.scheduler.schedule = timed_schedule  # type: ignore[method-assign]
    shapes = [
        PodSet(name="main", count=count, requests={"cpu": cpu * 1000, "memory": (2 << 30) * 1000})
        for count in (1, 2, 4)
        for cpu in (1, 2)
    ]
    created = now()
    fold_s = decide_s = 0.0
    submitted = 0
    running: list[WorkloadAdmitted] = []
    ready_from = 0
    while submitted < workloads or running or ready_from < len(sink.admitted):
        batch: list[AnyEvent] = []
        for _ in range(min(batch_size, workloads - submitted)):
            queue = rng.randrange(CLUSTER_QUEUES)
            ref = WorkloadRef(f"ns-{queue % 100}", f"job-{submitted}", f"uid-{submitted:06d}")
            batch.append(
                WorkloadSubmitted(
                    source="watcher",
                    workload=ref,
                    kind="Job",
                    queue_name=f"lq-{queue}",
                    pod_sets=[shapes[submitted % len(shapes)]],
                    created=created,
                )
            )
            submitted += 1
        finished, running = running[: len(running) // 2 + 1], running[len(running) // 2 + 1 :]
        started_now = sink.admitted[ready_from:]
        ready_from = len(sink.admitted)
        batch += [_ready(a) for a in started_now]
        batch += [_finished(a) for a in finished]
        running += started_now
        started = time.process_time()
        service._apply(batch)
        fold_s += time.process_time() - started
        started = time.process_time()
        asyncio.run(turn(service))
        decide_s += time.process_time() - started
    digest = sink.digest.hexdigest()[:12]
    return fold_s, decide_s, core_s, digest, len(sink.admitted), waited


def _ready(admitted: WorkloadAdmitted) -> WorkloadPodsReady:
    return WorkloadPodsReady(
        source="watcher", workload=admitted.workload, generation=admitted.generation, ready=True
    )


def _finished(admitted: WorkloadAdmitted) -> WorkloadFinished:
    return WorkloadFinished(
        source="watcher", workload=admitted.workload, generation=admitted.generation, succeeded=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="submissions per batch (larger: deeper queues)"
    )
    args = parser.parse_args()
    sys.stderr = open(os.devnull, "w")  # the log lines: written, and dropped
    configure_logging(service="admission")
    tune_gc()  # as run_service sets it for the service
    for _ in range(args.repeat):
        fold_s, decide_s, core_s, digest, admitted, waiting = run(args.workloads, args.batch)
        outside = fold_s + decide_s - core_s
        print(
            f"{args.workloads:,} workloads: fold {fold_s:.3f} s, decisions {decide_s:.3f} s"
            f" (schedule() {core_s:.3f} s); outside the core {outside:.3f} s,"
            f" {outside / args.workloads * 1e6:.1f} us per workload;"
            f" {admitted:,} admitted, {waiting:,} waiting decisions, digest {digest}"
        )


if __name__ == "__main__":
    main()
