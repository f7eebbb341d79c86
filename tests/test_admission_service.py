"""Admission's fold of the event stream (the service's pure step, no bus)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast
from unittest.mock import patch

import pytest

from services.admission import admission_checks, bounds, validation
from services.admission import gates as gates_module
from services.admission import pods_ready as pods_ready_module
from services.admission import service as service_module
from services.admission.activation import INACTIVE
from services.admission.scheduler import Admission
from services.admission.service import AdmissionService
from shared.config import parse_object
from shared.events import (
    EvictionRequested,
    PodSet,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.service import Runtime
from tests.scheduler_world import cq, flavor, group, lq


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


def _report(source: str, reason: str) -> WorkloadPending:
    return WorkloadPending(
        source=source, workload=_ref("small"), cluster_queue="cq", reason=reason, message="m"
    )


def _folded(report: WorkloadPending, *, deciding: bool, every_report: bool) -> object:
    """What the fold keeps after ``report`` (the workload's conditions, the inactive
    announcements still owed, the next pass's decisions); ``every_report``: with no report
    skipped as the leader's own echo."""
    service = _full_queue_with_a_waiting_preemptor()
    service.deciding = deciding
    service.activity.unannounced["uid-small"] = ("inactive-uid-small-0", "cq")
    if every_report:
        with patch.object(service_module, "_own_echo", lambda event: False):
            service._apply([report])
    else:
        service._apply([report])
    record = service.records["uid-small"]
    return record.conditions, dict(service.activity.unannounced), service.scheduler.schedule()


# (reason, deciding, the report's source and reason, whether the leader skips it)
ECHOES: list[tuple[str, bool, str, str, bool]] = [
    ("the leader's own report: skipped, changes nothing", True, "admission", "Waiting", True),
    ("the leader's own Inactive announcement: folded", True, "admission", INACTIVE, False),
    ("preemption's report: folded (shown, no victims)", True, "preemption", "NoVictims", False),
    ("a standby shows the leader's report: folded", False, "admission", "Waiting", False),
]


@pytest.mark.parametrize(
    ("reason", "deciding", "source", "said", "skipped"), ECHOES, ids=[c[0] for c in ECHOES]
)
def test_a_skipped_echo_changes_nothing(
    reason: str, deciding: bool, source: str, said: str, skipped: bool
) -> None:
    report = _report(source, said)
    assert service_module._own_echo(report) == (skipped or not deciding), reason
    kept = _folded(report, deciding=deciding, every_report=False)
    assert kept == _folded(report, deciding=deciding, every_report=True), reason
    untouched = _folded(_report("admission", "Nothing"), deciding=True, every_report=True)
    assert (kept == untouched) == skipped, reason  # a report folded changes something


def test_no_part_of_the_fold_reads_a_pending_report_but_those_named() -> None:
    """_own_echo's premise: validation, the gates, the pods-ready clock, the admission
    checks and the ageing bounds fold no WorkloadPending (were one to, the skip would hide
    the leader's own reports from it)."""
    for folded in (
        validation.CHECKED,
        gates_module._FOLDED,
        pods_ready_module._FOLDED,
        admission_checks._FOLDED,
        bounds._FOLDED,
    ):
        assert WorkloadPending not in folded, folded
