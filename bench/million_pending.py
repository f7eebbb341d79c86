"""A million pending: the admission service's state and its core's passes at that size.

``--workloads`` pending workloads (default 1,000,000) in ``--cluster-queues`` ClusterQueues
(default 10,000; 100 per cohort), each given to the admission service as the watcher's
``WorkloadSubmitted`` (JSON bytes decoded as the bus does, folded by the service's own
``_apply``), then the service's own decision step (``_decide``: the core's pass, then the
admission and pending events, the pending throttle, the display records), with a bus that
drops what it is given; the garbage collector set as every service sets it (shared/gc_tuning.py;
``BERTH_GC_TUNING=0``: Python's defaults). Prints:

- the first pass: the core's ``schedule()`` alone (target <= 10 s) and the whole step;
- a steady pass: 1% of what was admitted finishes (50 workloads) and the service decides
  again, 20 times: the core's pass mean and max (target <= 100 ms);
- with each pass's wall time, the CPU time this process spent in it, and the load average:
  on a shared machine the wall time of a pass grows with the load, its CPU time much less;
- memory: process RSS at the end and its peak (target <= 1 GB), and bytes per workload held
  from the RSS growth while folding and deciding: every structure of the service that holds
  a workload (its records with the submitted event and its last pending report, the core's
  queues and records, the throttle, ageing and limits books), not only the scheduler's. The
  bench itself keeps only the last pass's admissions (the service keeps no decision once
  published); the held pending reports count (the throttle releases them a second later).

    .venv/bin/python bench/million_pending.py                                   # 1,000,000
    .venv/bin/python bench/million_pending.py --workloads 100000 --cluster-queues 1000

Caveat printed with the figures: the bus and the metrics endpoint are not running (no
network buffers); logs are off (one line per decision at a million would be the cost).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import logging
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `services`, `shared` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
import structlog

from bench import admission_core
from bench.admission_stub import Acked, runtime_for, turn
from services.admission.scheduler import Admission
from services.admission.service import AdmissionService
from shared.config import ConfigObject
from shared.events import Event, PodSet, WorkloadFinished, WorkloadRef, WorkloadSubmitted
from shared.gc_tuning import GC_VARIABLE, tune_gc

V1 = "kueue.x-k8s.io/v1beta1"
PER_COHORT = 100
CHUNK = 10_000
FIRST_PASS_GOAL_S, STEADY_GOAL_MS, RSS_GOAL = 10.0, 100.0, 1 << 30
RSS_GOAL_DECIMAL = 10**9  # the "1 GB" read the other way: both verdicts are printed
STEADY_ROUNDS, PER_ROUND = 20, 50  # steady passes, and the admitted workloads each finishes
STEADY_FINISHES = STEADY_ROUNDS * PER_ROUND
ENCODER = msgspec.json.Encoder()


def build_config(cluster_queues: int) -> list[ConfigObject]:
    """bench/admission_core.py's world, 100 ClusterQueues per cohort."""
    return admission_core.build_config(cluster_queues, cohort_of=lambda index: index // PER_COHORT)


def submitted(i: int, queue: int, rng: random.Random) -> bytes:
    """The watcher's event for a Job, as JSON on the bus."""
    count, cpu = rng.choice((1, 2, 4)), rng.choice((1, 2))
    return ENCODER.encode(
        WorkloadSubmitted(
            source="watcher",
            workload=WorkloadRef(f"ns-{queue % 100}", f"job-{i}", f"uid-{i:07d}"),
            kind="Job",
            queue_name=f"lq-{queue}",
            pod_sets=[PodSet("main", count, {"cpu": cpu * 1000, "memory": (2 << 30) * 1000})],
            created=datetime.fromtimestamp(1_700_000_000.0 + i, UTC),
            priority=rng.randrange(4) * 100,
            labels={"kueue.x-k8s.io/queue-name": f"lq-{queue}"},
        )
    )


def rss() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    found = {"VmRSS:": 0, "VmHWM:": 0}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, *rest = line.split()
        if key in found:
            found[key] = int(rest[0]) * 1024
    return found["VmRSS:"], found["VmHWM:"]


class _DroppingBus:
    """The service publishes its decisions here; they are counted and dropped, each send
    acknowledged at once (services/admission/outbox.py awaits the acks behind the loop)."""

    def __init__(self) -> None:
        self.published = 0

    async def send_many(self, events: list[Event]) -> Acked:
        self.published += len(events)
        return Acked()


class _Timed:
    """Wraps the core's ``schedule`` to time each pass the service makes."""

    def __init__(self, schedule: Any) -> None:
        self.schedule = schedule
        self.last = self.last_cpu = 0.0
        self.decisions = 0
        # Every decision of every pass, in order: the same decisions give the same digest.
        self.digest = hashlib.sha256()
        # Of the last pass's admissions, their count and the first STEADY_FINISHES, the ones
        # the steady passes finish (the service keeps no decision once it has published it,
        # so neither does the bench: the memory figures count the service).
        self.admitted_count = 0
        self.admitted: list[Admission] = []

    def __call__(self) -> Any:
        started, cpu = time.perf_counter(), time.process_time()
        decisions = self.schedule()
        self.last = time.perf_counter() - started
        self.last_cpu = time.process_time() - cpu  # this process's CPU: less hurt by load
        self.decisions = len(decisions)
        for decision in decisions:
            self.digest.update(ENCODER.encode(decision))
        admitted = [d for d in decisions if isinstance(d, Admission)]
        self.admitted_count, self.admitted = len(admitted), admitted[:STEADY_FINISHES]
        return decisions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=1_000_000)
    parser.add_argument("--cluster-queues", type=int, default=10_000)
    args = parser.parse_args(argv)
    if args.workloads < 1 or args.cluster_queues < 1:
        parser.error("--workloads and --cluster-queues must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    try:
        gc_tuned = tune_gc()  # as run_service does for the service
    except ValueError as error:
        parser.error(str(error))
    rng = random.Random(7)
    bus = _DroppingBus()
    service = AdmissionService(runtime_for(bus))
    config = build_config(args.cluster_queues)
    service.scheduler.set_config(config)
    service.gates.set_config(config)
    timed = _Timed(service.scheduler.schedule)
    service.scheduler.schedule = timed  # type: ignore[method-assign]
    decoder = msgspec.json.Decoder(WorkloadSubmitted)

    gc.collect()
    rss_before, _ = rss()
    started = time.perf_counter()
    for base in range(0, args.workloads, CHUNK):
        wire = [
            submitted(i, rng.randrange(args.cluster_queues), rng)
            for i in range(base, min(args.workloads, base + CHUNK))
        ]
        service._apply([decoder.decode(data) for data in wire])
    del wire  # the last chunk's bytes: the bus's, not the service's
    fold_s = time.perf_counter() - started
    gc.collect()
    rss_folded, _ = rss()

    started = time.perf_counter()
    asyncio.run(turn(service))
    step_s = time.perf_counter() - started
    first_s, first_cpu = timed.last, timed.last_cpu
    first_decisions = timed.decisions
    admitted, admitted_count = timed.admitted, timed.admitted_count
    gc.collect()
    rss_decided, _ = rss()

    steady: list[float] = []
    steady_cpu: list[float] = []
    for round_ in range(STEADY_ROUNDS):
        finishes = [
            WorkloadFinished(
                source="watcher",
                workload=admission.ref,
                generation=service.scheduler.generation(admission.ref),
                succeeded=True,
            )
            for admission in admitted[round_ * PER_ROUND : (round_ + 1) * PER_ROUND]
        ]
        service._apply(finishes)
        asyncio.run(turn(service))
        steady.append(timed.last * 1000)
        steady_cpu.append(timed.last_cpu * 1000)
    rss_end, rss_peak = rss()
    per_folded = (rss_folded - rss_before) / args.workloads
    per_held = (rss_decided - rss_before) / args.workloads

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    steady_mean = sum(steady) / len(steady)
    print(
        f"{args.workloads:,} workloads in {args.cluster_queues:,} ClusterQueues"
        f" ({PER_COHORT} per cohort), through the admission service's fold and decision step"
    )
    print(f"fold of the submitted events:   {fold_s:.1f} s (decode and _apply)")
    print(
        f"first pass, core schedule():    {first_s:.2f} s, {first_decisions:,} decisions,"
        f" {admitted_count:,} admitted (target <= {FIRST_PASS_GOAL_S:g} s:"
        f" {verdict(first_s <= FIRST_PASS_GOAL_S)}); {first_cpu:.2f} s of CPU"
    )
    print(f"first decision step, whole:     {step_s:.2f} s ({bus.published:,} events published)")
    print(
        f"steady pass ({PER_ROUND} finish), core:  mean {steady_mean:.0f} ms,"
        f" max {max(steady):.0f} ms over {STEADY_ROUNDS} (target <= {STEADY_GOAL_MS:g} ms: {verdict(steady_mean <= STEADY_GOAL_MS)});"
        f" CPU mean {sum(steady_cpu) / len(steady_cpu):.0f} ms"
    )
    print(f"decisions digest:               {timed.digest.hexdigest()[:12]} (every pass, in order)")
    print(
        f"garbage collector:              threshold {gc.get_threshold()}"
        f" ({GC_VARIABLE}={int(gc_tuned)}: {'tuned' if gc_tuned else 'Python defaults'})"
    )
    print(
        f"load average at the end:        {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    print(
        f"process RSS: end {rss_end / 2**20:,.0f} MiB, peak {rss_peak / 2**20:,.0f} MiB"
        f" (target <= 1 GB read as 1 GiB, 1,024 MiB: {verdict(rss_peak <= RSS_GOAL)};"
        f" read as 10^9 bytes, 954 MiB: {verdict(rss_peak <= RSS_GOAL_DECIMAL)})"
    )
    print(
        f"bytes per workload held:        {per_held:,.0f} after the first step (submitted event,"
        f" display record with its pending report, core, throttle, books); {per_folded:,.0f}"
        " after the fold alone"
    )
    print(
        "caveats: in-process, no bus or metrics endpoint running; logs off; RSS growth"
        " includes the allocator's free lists"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
