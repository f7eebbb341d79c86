"""The deciding leader's preemption asks on a real nats-server (services/admission/service.py
with services/admission/preemption_asks.py): what it publishes after a boost and after taking
over, read back from the stream."""

from __future__ import annotations

from pathlib import Path

from services.admission.preemption_asks import taken_over
from services.admission.service import AdmissionService
from shared.bus import Bus
from shared.candidates import NO_CANDIDATES
from shared.config import ConfigObject, parse_object
from shared.events import (
    ContestedResource,
    Event,
    PodSet,
    PriorityBoosted,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.service import Runtime
from tests.test_bus_batches import _connect
from tests.test_scheduler import cq, flavor, group, lq, wpc


def _config() -> list[ConfigObject]:
    return [
        parse_object(doc)
        for doc in (
            flavor("default"),
            cq(
                "cq",
                group(["cpu"], ("default", {"cpu": 9})),
                preemption={"withinClusterQueue": "LowerPriority"},
            ),
            lq("user-queue", "cq"),
            wpc("high", 1000),
            wpc("low", 100),
        )
    ]


def _job(name: str, cpu: int, priority_class: str) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="test",
        workload=WorkloadRef("default", name, f"uid-{name}"),
        kind="Job",
        queue_name="user-queue",
        pod_sets=[PodSet("main", 1, {"cpu": cpu * 1000})],
        created=now(),
        priority_class=priority_class,
    )


async def _service(bus: Bus, tmp_path: Path) -> AdmissionService:
    service = AdmissionService(Runtime(name="admission", bus=bus, data_dir=str(tmp_path)))
    service.scheduler.set_config(_config())
    service.gates.set_config(_config())
    service.deciding = True
    return service


async def _turn(service: AdmissionService, *events: Event) -> None:
    service._apply(list(events))
    await service._decide()
    await service.outbox.settled()


async def _reports(bus: Bus, name: str) -> list[WorkloadPending]:
    subscription = await bus.replay_subscription(["berth.cq.*.pending.>"])
    reports: list[WorkloadPending] = []
    while batch := await bus.next_batch(subscription, wait=1.0):
        reports += [e for e in batch if type(e) is WorkloadPending and e.workload.name == name]
    return reports


async def test_a_boost_above_what_runs_is_asked_in_the_next_turn(
    nats_url: str, tmp_path: Path
) -> None:
    """Held for want of a candidate (only its own priority runs), a workload whose ageing
    boost lifts it above what runs is asked in the next turn; the boost itself changes no
    decision, so only the fold's word to the held asks can do it."""
    bus = await _connect(nats_url, "admission")
    try:
        service = await _service(bus, tmp_path)
        await _turn(service, _job("running", 4, "high"))
        await _turn(service, _job("waiting", 6, "high"))
        assert len(service.preemption_asks) == 1
        boost = PriorityBoosted(
            source="recovery",
            workload=WorkloadRef("default", "waiting", "uid-waiting"),
            boost=5,
            can_preempt=True,
        )
        await _turn(service, boost)
        asked = [r for r in await _reports(bus, "waiting") if r.preemption_may_help]
        assert [(r.priority, r.contested) for r in asked] == [
            (1005, [ContestedResource("default", "cpu", 6000)])
        ]
    finally:
        await bus.close()


async def test_a_replica_taking_over_asks_what_another_leader_sent_without_the_ask(
    nats_url: str, tmp_path: Path
) -> None:
    """This replica asked preemption about a workload, stood by, and read another leader's
    report for it without the ask. Taking over, it reports the workload again, here with
    the ask (a lower priority runs): its own verdict is unchanged, so without the takeover's
    look nothing would be sent and the preemption service would never search for it."""
    bus = await _connect(nats_url, "admission")
    try:
        service = await _service(bus, tmp_path)
        await _turn(service, _job("running", 4, "high"), _job("small", 2, "low"))
        await _turn(service, _job("waiting", 6, "high"))
        [asked] = await _reports(bus, "waiting")
        assert asked.preemption_may_help
        service.deciding = False  # stood by; another leader's report comes
        foreign = WorkloadPending(
            source="admission",
            workload=asked.workload,
            cluster_queue="cq",
            reason="Pending",
            message=f"couldn't assign flavors to pod set main; {NO_CANDIDATES}",
            priority=1000,
        )
        service._apply([foreign])
        taken_over(service.preemption_asks, service.records.values(), service.scheduler)
        service.deciding = True
        await _turn(service)
        mine = [r for r in await _reports(bus, "waiting") if r.id != asked.id]
        assert [r.preemption_may_help for r in mine] == [True]
    finally:
        await bus.close()
