"""Micro-benchmark of admission's waitForPodsReady clock (services/admission/pods_ready.py).

Folds 100,000 admissions and their first PodsReady, then 10,000 losses of readiness, and asks
what is due once every recovery timeout is over. Prints the fold's cost per event, the
losses' fold, and ``due()`` (which pops every stale deadline and builds the 10,000
evictions), best of ``--rounds``. Run:

    .venv/bin/python bench/pods_ready_clock.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import time
from datetime import UTC, datetime

from services.admission.pods_ready import PodsReadyClock
from shared.admission_checks import WaitForPodsReady
from shared.events import AnyEvent, WorkloadAdmitted, WorkloadPodsReady, WorkloadRef

WORKLOADS = 100_000
LOST = 10_000


def _events() -> tuple[list[AnyEvent], list[AnyEvent]]:
    refs = [WorkloadRef("ns", f"w{i}", f"u{i}") for i in range(WORKLOADS)]
    at = datetime.fromtimestamp(1_000, UTC)
    lost_at = datetime.fromtimestamp(1_100, UTC)
    start: list[AnyEvent] = [
        WorkloadAdmitted(
            source="admission",
            workload=ref,
            cluster_queue="cq",
            local_queue="lq",
            priority=0,
            assignments=[],
            generation=1,
            time=at,
        )
        for ref in refs
    ]
    start += [WorkloadPodsReady(source="watcher", workload=r, generation=1, time=at) for r in refs]
    lost: list[AnyEvent] = [
        WorkloadPodsReady(source="watcher", workload=r, generation=1, ready=False, time=lost_at)
        for r in refs[:LOST]
    ]
    return start, lost


def _round(start: list[AnyEvent], lost: list[AnyEvent]) -> tuple[float, float, float, int]:
    clock = PodsReadyClock()
    clock.configure(WaitForPodsReady(enable=True, timeout="10s", recovery_timeout="30s"))
    gc.collect()
    began = time.perf_counter()
    for event in start:
        clock.apply(event)
    folded = time.perf_counter()
    for event in lost:
        clock.apply(event)
    lost_folded = time.perf_counter()
    due = clock.due(2_000.0)
    decided = time.perf_counter()
    return folded - began, lost_folded - folded, decided - lost_folded, len(due)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    start, lost = _events()
    results = [_round(start, lost) for _ in range(rounds)]
    fold = min(r[0] for r in results)
    losses = min(r[1] for r in results)
    due = min(r[2] for r in results)
    print(
        f"fold of {len(start):,} admissions and PodsReady: {fold / len(start) * 1e6:.2f} us/event"
    )
    print(f"fold of {len(lost):,} losses: {losses / len(lost) * 1e6:.2f} us/event")
    print(f"due(): {due * 1e3:.0f} ms for {results[0][3]:,} evictions (best of {rounds})")


if __name__ == "__main__":
    main()
