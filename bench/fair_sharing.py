"""What fair sharing's admission order costs the admission core.

The same world with ``Configuration.spec.fairSharing.enable`` off and on: QUEUES
ClusterQueues in COHORTS cohorts, each with no quota of its own but one lender per cohort, so
every admission borrows and the tournament decides each one. Prints the first pass (everything
pending) and a steady-state pass (1% of admitted finish, what fits is admitted) for both, and
how evenly the cohort's quota ended up spread (the largest and smallest ClusterQueue usage).
Then admission fair sharing: 10,000 pending in one ClusterQueue from 50 LocalQueues, with
``admissionScope`` and the Configuration's ``admissionFairSharing`` off and on, and how evenly
the LocalQueues shared it. Run:

    .venv/bin/python bench/fair_sharing.py [QUEUES] [COHORTS] [WORKLOADS]
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from shared.config import ConfigObject, parse_object
from shared.events import PodSet, WorkloadRef

V1 = "kueue.x-k8s.io/v1beta1"


def _queue(name: str, cohort: str, cpu: int) -> dict[str, Any]:
    flavors = [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]
    return {
        "apiVersion": V1,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavors}],
        },
    }


def build(queues: int, cohorts: int, fair: bool) -> list[ConfigObject]:
    documents: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "berth"},
            "spec": {"fairSharing": {"enable": fair}},
        },
    ]
    per_cohort = queues // cohorts
    for c in range(cohorts):
        documents.append(_queue(f"lender-{c}", f"cohort-{c}", 10 * per_cohort))
    for q in range(queues):
        documents.append(_queue(f"cq-{q}", f"cohort-{q % cohorts}", 0))
        documents.append(
            {
                "apiVersion": V1,
                "kind": "LocalQueue",
                "metadata": {"name": f"lq-{q}", "namespace": "default"},
                "spec": {"clusterQueue": f"cq-{q}"},
            }
        )
    return [parse_object(document) for document in documents]


def _submit(scheduler: Scheduler, workloads: int, local_queues: int) -> None:
    """Workloads of 1, 2 or 4 CPUs spread over ``lq-0..lq-N`` by a fixed seed."""
    rng = random.Random(7)
    for i in range(workloads):
        queue = rng.randrange(local_queues)
        cpu = rng.choice((1, 2, 4))
        scheduler.submit(
            QueuedWorkload(
                ref=WorkloadRef(namespace="default", name=f"job-{i}", uid=f"uid-{i:06d}"),
                local_queue=f"lq-{queue}",
                pod_sets=[PodSet(name="main", count=1, requests={"cpu": cpu * 1000})],
                queue_time=1_700_000_000.0 + i,
            )
        )


def _timed_passes(scheduler: Scheduler) -> tuple[list[Admission], float, float]:
    """The first pass over the backlog, then the mean of ten passes that each follow ten finishes."""
    start = time.perf_counter()
    admitted = [d for d in scheduler.schedule() if isinstance(d, Admission)]
    first = time.perf_counter() - start
    steady = 0.0
    for round_ in range(10):
        for admission in admitted[round_ * 10 : (round_ + 1) * 10]:
            scheduler.finish(admission.ref)
        start = time.perf_counter()
        scheduler.schedule()
        steady += time.perf_counter() - start
    return admitted, first, steady / 10


def run(queues: int, cohorts: int, workloads: int, fair: bool) -> None:
    scheduler = Scheduler()
    scheduler.set_config(build(queues, cohorts, fair))
    _submit(scheduler, workloads, queues)
    admitted, first, steady = _timed_passes(scheduler)
    usage = [
        sum(scheduler.quota.usage(f"cq-{q}").values()) // 1000
        for q in range(queues)
        if q % cohorts == 0
    ]
    print(
        f"fair sharing {'on ' if fair else 'off'}: first pass {first:.2f} s, {len(admitted):,}"
        f" admitted; steady pass {steady * 1000:.1f} ms; cohort-0 queues use"
        f" {min(usage)}-{max(usage)} CPUs; violations {len(scheduler.quota.violations())}"
    )


def afs_world(local_queues: int, on: bool) -> list[ConfigObject]:
    """ClusterQueue `shared` (2,000 CPUs, ``admissionScope`` usage-based) and LocalQueues
    lq-0...; the Configuration's ``admissionFairSharing`` (half-life 1h) when ``on``."""
    spec = {"admissionFairSharing": {"usageHalfLifeTime": "1h"}} if on else {}
    cluster_queue = _queue("shared", "", 2000)
    cluster_queue["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    documents: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "berth"},
            "spec": spec,
        },
        cluster_queue,
    ]
    documents += [
        {
            "apiVersion": V1,
            "kind": "LocalQueue",
            "metadata": {"name": f"lq-{i}", "namespace": "default"},
            "spec": {"clusterQueue": "shared"},
        }
        for i in range(local_queues)
    ]
    return [parse_object(document) for document in documents]


def run_afs(local_queues: int, workloads: int, on: bool) -> None:
    scheduler = Scheduler()
    scheduler.set_config(afs_world(local_queues, on))
    _submit(scheduler, workloads, local_queues)
    admitted, first, steady = _timed_passes(scheduler)
    cpus: dict[str, int] = {}
    for admission in admitted:
        used = sum(sum(a.usage.values()) for a in admission.assignments) // 1000
        cpus[admission.local_queue] = cpus.get(admission.local_queue, 0) + used
    print(
        f"admission fair sharing {'on ' if on else 'off'}: first pass {first:.2f} s,"
        f" {len(admitted):,} admitted; steady pass {steady * 1000:.1f} ms; LocalQueues"
        f" got {min(cpus.values())}-{max(cpus.values())} CPUs"
    )


def main() -> None:
    queues, cohorts, workloads = (int(a) for a in [*sys.argv[1:], "100", "10", "10000"][:3])
    print(f"{workloads:,} pending in {queues} ClusterQueues, {cohorts} cohorts (all borrowing)")
    for fair in (False, True):
        run(queues, cohorts, workloads, fair)
    print("10,000 pending in one ClusterQueue of 2,000 CPUs from 50 LocalQueues")
    for on in (False, True):
        run_afs(50, 10_000, on)


if __name__ == "__main__":
    main()
