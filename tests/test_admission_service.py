"""Admission's fold of the event stream (the service's pure step, no bus)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from services.admission.scheduler import Admission
from services.admission.service import AdmissionService
from shared.config import parse_object
from shared.events import (
    EvictionRequested,
    PodSet,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.service import Runtime
from tests.test_scheduler import cq, flavor, group, lq


def _service() -> AdmissionService:
    # The fold and the pass read no bus; run() is what needs one.
    service = AdmissionService(cast(Runtime, SimpleNamespace(bus=None)))
    documents = [
        flavor("default"),
        cq("cq", group(["cpu"], ("default", {"cpu": 4}))),
        lq("lq", "cq"),
    ]
    service.scheduler.set_config([parse_object(d) for d in documents])
    return service


def _ref(name: str) -> WorkloadRef:
    return WorkloadRef("default", name, f"uid-{name}")


def _submitted(name: str, cpus: int, priority: int) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="test",
        workload=_ref(name),
        kind="Job",
        queue_name="lq",
        pod_sets=[PodSet("main", 1, {"cpu": cpus * 1000})],
        created=now(),
        priority=priority,
    )


def _victim_evicted_for_the_preemptor() -> EvictionRequested:
    return EvictionRequested(
        source="preemption",
        workload=_ref("victim"),
        cluster_queue="cq",
        generation=1,
        reason="Preempted",
        preemptor=_ref("preemptor"),
    )


def _admitted(service: AdmissionService) -> list[str]:
    return [d.ref.name for d in service.scheduler.schedule() if isinstance(d, Admission)]


def _full_queue_with_a_waiting_preemptor() -> AdmissionService:
    """4 CPUs held by "victim" and "other" (2 each); "preemptor" (4, high priority) and
    "small" (1) wait."""
    service = _service()
    service._apply([_submitted("victim", 2, 0), _submitted("other", 2, 0)])
    assert sorted(_admitted(service)) == ["other", "victim"]
    service._apply([_submitted("preemptor", 4, 100), _submitted("small", 1, 0)])
    assert _admitted(service) == []  # the ClusterQueue is full
    return service


def test_a_late_eviction_of_a_finished_victim_blocks_nothing() -> None:
    """Preemption, running behind, asks to evict a victim that already finished: nothing is
    leaving for the preemptor, so it is not nominated, and its ClusterQueue does not wait
    behind it (what fits behind it is admitted)."""
    service = _full_queue_with_a_waiting_preemptor()
    finished = WorkloadFinished(
        source="watcher", workload=_ref("victim"), generation=1, succeeded=True
    )
    service._apply([finished, _victim_evicted_for_the_preemptor()])
    assert _admitted(service) == ["small"]  # the preemptor (4 CPUs) still does not fit


def test_an_eviction_in_flight_keeps_the_room_for_the_preemptor() -> None:
    """The counterpart: while its victim is still leaving, the preemptor is nominated and
    nothing smaller takes the room it waits for."""
    service = _full_queue_with_a_waiting_preemptor()
    service._apply([_victim_evicted_for_the_preemptor()])
    assert _admitted(service) == []
