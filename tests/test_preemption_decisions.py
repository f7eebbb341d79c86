"""What the preemption service tells a waiting preemptor (its pure decision step)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from services.preemption.service import PreemptionService
from shared.events import (
    ContestedResource,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadPending,
    WorkloadRef,
)
from shared.service import Runtime
from tests.test_victims import cq

PREEMPTOR = WorkloadRef("default", "preemptor", "p")


def _service() -> PreemptionService:
    # The decision step reads only the folded cluster; run() is what needs the bus.
    service = PreemptionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.cluster.set_config([cq("cq", {"rf/cpu": 4})])  # preemption policies Never
    return service


def _admit(service: PreemptionService, name: str, cpus: int) -> None:
    service.cluster.apply(
        WorkloadAdmitted(
            source="admission",
            workload=WorkloadRef("default", name, name),
            cluster_queue="cq",
            local_queue="lq",
            priority=0,
            assignments=[
                FlavorAssignment("main", 1, {"cpu": "rf"}, {"cpu": cpus * 1000}),
            ],
            generation=1,
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
