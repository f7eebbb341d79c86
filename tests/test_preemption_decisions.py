"""What the preemption service tells a waiting preemptor (its pure decision step)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from services.preemption.service import PreemptionService
from shared.events import (
    ContestedResource,
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
)
from shared.service import Runtime
from tests.victims_search import cq

PREEMPTOR = WorkloadRef("default", "preemptor", "p")


def _service() -> PreemptionService:
    # The decision step reads only the folded cluster; run() is what needs the bus.
    service = PreemptionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.cluster.set_config([cq("cq", {"rf/cpu": 4})])  # preemption policies Never
    return service


def _admit(service: PreemptionService, name: str, cpus: int, queue: str = "cq") -> None:
    service.cluster.apply(
        WorkloadAdmitted(
            source="admission",
            workload=WorkloadRef("default", name, name),
            cluster_queue=queue,
            local_queue="lq",
            priority=0,
            assignments=[
                FlavorAssignment("main", 1, {"cpu": "rf"}, {"cpu": cpus * 1000}),
            ],
            generation=1,
        )
    )


def _finish(service: PreemptionService, name: str) -> None:
    service.cluster.apply(
        WorkloadFinished(
            source="watcher",
            workload=WorkloadRef("default", name, name),
            generation=1,
            succeeded=True,
        )
    )


def _ask(service: PreemptionService, cpus: int) -> None:
    service.cluster.apply(
        WorkloadPending(
            source="admission",
            workload=PREEMPTOR,
            cluster_queue="cq",
            reason="Pending",
            message="insufficient unused quota",
            priority=100,
            preemption_may_help=True,
            contested=[ContestedResource("rf", "cpu", cpus * 1000)],
        )
    )


def test_no_candidates_is_told() -> None:
    service = _service()
    _admit(service, "running", 4)
    _ask(service, 2)
    [told] = service._evaluate(PREEMPTOR.uid)
    assert isinstance(told, WorkloadPending) and told.source == "preemption"
    assert told.message.startswith("insufficient unused quota; ")
    assert service._evaluate(PREEMPTOR.uid) == []  # the same answer is not told twice


def test_room_freed_meanwhile_is_not_told() -> None:
    """The workload fits now (a finish raced admission's request): admission's next pass
    admits it, and a pending message saying "it fits" would only confuse."""
    service = _service()
    _admit(service, "running", 2)
    _ask(service, 2)
    assert service._evaluate(PREEMPTOR.uid) == []


def test_candidates_come_from_the_preemptors_cohort_only() -> None:
    service = _service()
    service.cluster.set_config(
        [
            cq("a1", {"rf/cpu": 4}, cohort="a"),
            cq("a2", {"rf/cpu": 4}, cohort="a"),
            cq("b1", {"rf/cpu": 4}, cohort="b"),
            cq("alone", {"rf/cpu": 4}),
        ]
    )
    for name, queue in [("in-a1", "a1"), ("in-a2", "a2"), ("in-b1", "b1"), ("solo", "alone")]:
        _admit(service, name, 1, queue=queue)
    names = {w.ref.name for w in service.cluster.candidates("a1")}
    assert names == {"in-a1", "in-a2"}
    assert {w.ref.name for w in service.cluster.candidates("alone")} == {"solo"}
    assert list(service.cluster.candidates("unknown")) == []


def test_a_preemptor_is_busy_until_its_last_victim_left() -> None:
    service = _service()
    _admit(service, "first", 2)
    _admit(service, "second", 2)
    _ask(service, 4)
    for name in ("first", "second"):
        service.cluster.apply(
            EvictionRequested(
                source="preemption",
                workload=WorkloadRef("default", name, name),
                cluster_queue="cq",
                generation=1,
                reason="Preempted",
                preemptor=PREEMPTOR,
            )
        )
    assert service.cluster.busy(PREEMPTOR.uid)
    assert list(service.cluster.candidates("cq")) == []  # both are someone's victims already
    _finish(service, "first")
    assert service.cluster.busy(PREEMPTOR.uid)
    _finish(service, "second")
    assert not service.cluster.busy(PREEMPTOR.uid)
    assert service.cluster.in_flight == {}
    assert service.cluster.tree.cluster_queues["cq"].usage.get(("rf", "cpu"), 0) == 0
