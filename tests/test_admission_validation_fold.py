"""The fold refuses (services/admission/validation.py through AdmissionService): a refused fact
is logged once with one line, counted, and never reaches the scheduler; a known uid under
another identity is judged."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from services.admission import validation
from services.admission.scheduler import Admission
from shared.events import PodSet, WorkloadRef
from tests.conftest import captured_logs
from tests.validation_facts import GOOD_REF, admission_service, admitted, submitted


def _refused_count(reason: str) -> float:
    value = REGISTRY.get_sample_value("berth_admission_refused_facts_total", {"reason": reason})
    return value or 0.0


def test_a_refused_fact_is_logged_once_counted_and_never_folded() -> None:
    service = admission_service()
    before = _refused_count("negative_quantity")
    bad = submitted([PodSet("main", 2, {"cpu": -1000})])
    with captured_logs(validation) as logs:
        service._apply([bad])
    assert [log for log in logs if log["event"] == "fact_refused"] == [
        {
            "component": "admission.validation",
            "event": "fact_refused",
            "log_level": "warning",
            "workload": "default/job",
            "queue": "lq0",
            "reason": 'pod set "main" requests: cpu -1000m is negative',
            "fact": "WorkloadSubmitted",
            "event_id": bad.id,
        }
    ]
    assert _refused_count("negative_quantity") == before + 1
    assert service.scheduler.workload_views() == []  # never reached the scheduler
    assert "uid-1" not in service.records
    # The next good workload is admitted as usual.
    service._apply([submitted(ref=WorkloadRef("default", "good", "uid-2"))])
    assert [d.ref.name for d in service.scheduler.schedule() if isinstance(d, Admission)] == [
        "good"
    ]


# (the admission's workload, refused, why): the fold passes a folded submission's identity
FOLD_KNOWN_CASES = [
    (GOOD_REF, False, "the submitted workload's own identity: folded"),
    (WorkloadRef("Team A", "job", "uid-1"), True, "its uid under a bad namespace: refused"),
    (WorkloadRef("default", "Bad Name", "uid-1"), True, "its uid under a bad name: refused"),
]


@pytest.mark.parametrize(("ref", "refused", "why"), FOLD_KNOWN_CASES)
def test_the_fold_checks_a_known_uid_under_another_identity(
    ref: WorkloadRef, refused: bool, why: str
) -> None:
    service = admission_service()
    service._apply([submitted()])
    before = _refused_count("invalid_name")
    service._apply([admitted({"cpu": 1000}, ref=ref)])
    assert _refused_count("invalid_name") == before + refused, why
    assert (service.records["uid-1"].admission is None) == refused, why
