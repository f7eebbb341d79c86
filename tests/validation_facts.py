"""What tests/test_admission_validation_*.py share: the facts they judge (a submission, an
admission, an admission of one given assignment) and the admission service they fold them
through (services/admission/validation.py refuses before the scheduler sees them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import msgspec

from services.admission.service import AdmissionService
from shared.config import parse_object
from shared.events import (
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.service import Runtime
from tests.scheduler_world import cq, flavor, group, lq

GOOD_REF = WorkloadRef("default", "job", "uid-1")


def submitted(
    pod_sets: list[PodSet] | None = None, ref: WorkloadRef = GOOD_REF, queue: str = "lq0"
) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="watcher",
        workload=ref,
        kind="Job",
        queue_name=queue,
        pod_sets=[PodSet("main", 1, {"cpu": 1000})] if pod_sets is None else pod_sets,
        created=now(),
    )


def admitted(
    usage: dict[str, int], ref: WorkloadRef = GOOD_REF, cq: str = "cq0"
) -> WorkloadAdmitted:
    assignment = FlavorAssignment("main", 1, {r: "f" for r in usage}, usage)
    return WorkloadAdmitted(
        source="admission",
        workload=ref,
        cluster_queue=cq,
        local_queue="lq0",
        priority=0,
        assignments=[assignment],
        generation=1,
    )


def assigned(assignment: FlavorAssignment) -> WorkloadAdmitted:
    return msgspec.structs.replace(admitted({"cpu": 1}), assignments=[assignment])


def admission_service() -> AdmissionService:
    service = AdmissionService(cast(Runtime, SimpleNamespace(bus=None)))
    documents = [
        flavor("f"),
        cq("cq0", group(["cpu"], ("f", {"cpu": (4, 2, None)})), cohort="c"),
        cq("cq1", group(["cpu"], ("f", {"cpu": 2})), cohort="c"),
        lq("lq0", "cq0"),
        lq("lq1", "cq1"),
    ]
    service.scheduler.set_config([parse_object(d) for d in documents])
    return service
