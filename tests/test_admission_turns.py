"""One turn of the deciding leader (services/admission/service.py ``_decide``) against a real
nats-server: what it publishes, in which order, read back from the stream."""

from __future__ import annotations

from pathlib import Path

from services.admission.service import AdmissionService
from shared.config import parse_object
from shared.events import (
    AdmissionCheckUpdated,
    PodSet,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.service import Runtime
from tests.batched_bus import _connect
from tests.scheduler_world import cq, flavor, group, lq
from tests.test_admission_checks import _check, _configuration


def _submitted(name: str, queue: str) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="test",
        workload=WorkloadRef("default", name, f"uid-{name}"),
        kind="Job",
        queue_name=queue,
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=now(),
        priority=0,
    )


async def test_a_check_answered_ready_is_admitted_before_the_pass_of_its_turn(
    nats_url: str, tmp_path: Path
) -> None:
    """With waitForPodsReady's blockAdmission, a workload whose admission check turned Ready
    is admitted, and its pods are then awaited, before the pass of the same turn decides:
    that pass admits nothing else (it once admitted another workload ahead of it, both with
    pods not ready, when the gate decisions went out after the pass)."""
    bus = await _connect(nats_url, "admission")
    try:
        service = AdmissionService(Runtime(name="admission", bus=bus, data_dir=str(tmp_path)))
        objects = [
            parse_object(doc)
            for doc in (
                flavor("default"),
                _check("budget"),
                cq("checked", group(["cpu"], ("default", {"cpu": 4})), admissionChecks=["budget"]),
                cq("plain", group(["cpu"], ("default", {"cpu": 4}))),
                lq("lq-checked", "checked"),
                lq("lq-plain", "plain"),
                _configuration(enable=True, timeout="300s"),
            )
        ]
        service.scheduler.set_config(objects)
        service.gates.set_config(objects)
        service.deciding = True
        service._apply([_submitted("w1", "lq-checked")])
        await service._decide()  # w1's quota reserved
        ready = AdmissionCheckUpdated(
            source="cli",
            workload=WorkloadRef("default", "w1", "uid-w1"),
            check="budget",
            state="Ready",
            generation=1,
            time=now(),
        )
        service._apply([ready, _submitted("w2", "lq-plain")])
        await service._decide()
        await service.outbox.settled()
        subscription = await bus.replay_subscription(
            ["berth.cq.*.admitted.>", "berth.cq.*.reserved.>"]
        )
        admitted: list[tuple[str, bool]] = []
        while batch := await bus.next_batch(subscription, wait=1.0):
            admitted += [
                (e.workload.name, e.reserved_only) for e in batch if type(e) is WorkloadAdmitted
            ]
        assert admitted == [("w1", True), ("w1", False)], "w2 waits for w1's pods"
    finally:
        await bus.close()
