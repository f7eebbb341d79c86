"""What rebuilding admission fair sharing's history costs a restart.

Admission rebuilds each LocalQueue's consumption by folding the event stream on start
(services/admission/admission_fair_sharing.py says why, rather than persisting it). This folds
one stream of WORKLOADS workloads through 50 LocalQueues of one ClusterQueue (each submitted,
admitted, finished, one second apart) into a fresh in-process admission service, in
bench/fair_sharing.py's world with the Configuration's ``admissionFairSharing`` off and on,
and prints the replay time of each and what the history adds per event. Run:

    .venv/bin/python bench/afs_replay.py [WORKLOADS]
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import cast

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fair_sharing import afs_world
from services.admission.service import AdmissionService
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.service import Runtime

LOCAL_QUEUES = 50


def _service(fair: bool) -> AdmissionService:
    service = AdmissionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.scheduler.set_config(afs_world(LOCAL_QUEUES, fair))
    return service


def _stream(workloads: int) -> list[AnyEvent]:
    start = datetime.now(UTC) - timedelta(seconds=workloads + 10)
    events: list[AnyEvent] = []
    for i in range(workloads):
        at = start + timedelta(seconds=i)
        ref = WorkloadRef("default", f"w{i}", f"uid-{i}")
        assignment = FlavorAssignment("main", 1, {"cpu": "default"}, {"cpu": 1000})
        events += [
            WorkloadSubmitted(
                source="bench",
                workload=ref,
                kind="Job",
                queue_name=f"lq-{i % LOCAL_QUEUES}",
                pod_sets=[PodSet("main", 1, {"cpu": 1000})],
                created=at,
                time=at,
            ),
            WorkloadAdmitted(
                source="admission",
                workload=ref,
                cluster_queue="shared",
                local_queue=f"lq-{i % LOCAL_QUEUES}",
                priority=0,
                assignments=[assignment],
                generation=1,
                time=at,
            ),
            WorkloadFinished(
                source="watcher",
                workload=ref,
                generation=1,
                succeeded=True,
                time=at + timedelta(seconds=5),
            ),
        ]
    return events


def main() -> None:
    workloads = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    events = _stream(workloads)
    seconds = {}
    for fair in (False, True):
        service = _service(fair)
        started = time.perf_counter()
        service._apply(events)
        seconds[fair] = time.perf_counter() - started
        label = "on " if fair else "off"
        print(
            f"admission fair sharing {label}: {len(events):,} events replayed in"
            f" {seconds[fair]:.3f} s ({seconds[fair] / len(events) * 1e6:.1f} us/event)"
        )
    extra = (seconds[True] - seconds[False]) / len(events) * 1e6
    print(f"the history's fold adds {extra:.1f} us/event")


if __name__ == "__main__":
    main()
