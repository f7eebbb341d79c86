"""The pure admission core (services.admission.scheduler), one rule per test: the seed scenarios
003 (one GPU queue) and 004 (cohort borrowing and the preemption hint)."""

from __future__ import annotations

from typing import Any

from services.admission.scheduler import Admission, QueuedWorkload
from shared.config import ConfigObject
from shared.events import PodSet
from shared.quantities import parse_quantity
from tests.scheduler_world import (
    admitted,
    config,
    cq,
    flavor,
    group,
    lq,
    namespace,
    pending,
    ref,
    scheduler,
    wl,
    wpc,
)


def seed_003(cpu: Any = 2, memory: Any = "8G", gpu: Any = 1) -> list[ConfigObject]:
    return config(
        flavor("default-flavor"),
        cq(
            "cluster-queue",
            group(
                ["cpu", "memory", "nvidia.com/gpu"],
                ("default-flavor", {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu}),
            ),
            preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        ),
        lq("user-queue", "cluster-queue"),
        wpc("prod-priority", 1000),
        wpc("dev-priority", 100),
    )


def gpu_job(name: str, t: float) -> QueuedWorkload:
    return QueuedWorkload(
        ref=ref(name),
        local_queue="user-queue",
        pod_sets=[
            PodSet(
                name="main",
                count=1,
                requests={"cpu": 1000, "memory": parse_quantity("4G"), "nvidia.com/gpu": 1000},
            )
        ],
        queue_time=t,
        priority_class="dev-priority",
    )


def test_seed_003_single_gpu_queue() -> None:
    """Seed 003: one GPU admits one job; finishing admits the next; raising quota admits all."""
    s = scheduler(seed_003(), gpu_job("a", 1), gpu_job("b", 2), gpu_job("c", 3))
    decisions = s.schedule()
    assert admitted(decisions) == ["a"]
    waiting = pending(decisions)
    assert set(waiting) == {"b", "c"}
    assert waiting["b"].message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for"
        " nvidia.com/gpu in flavor default-flavor, 1 more needed"
    )
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b"]
    s.set_config(seed_003(cpu=100, memory="100Gi", gpu=10))
    assert admitted(s.schedule()) == ["c"]
    status = s.cluster_queue_status("cluster-queue")
    assert status["admittedWorkloads"] == 2
    assert status["pendingWorkloads"] == 0
    gpu = status["flavorsUsage"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "total": "2", "borrowed": "0"}


def seed_004() -> list[ConfigObject]:
    return config(
        flavor("default-flavor"),
        flavor("gpu-flavor", nodeLabels={"accelerator": "nvidia"}),
        namespace("team-a", team="team-a"),
        namespace("team-b", team="team-b"),
        cq(
            "team-a-cq",
            group(["cpu", "memory"], ("default-flavor", {"cpu": 0, "memory": 0})),
            group(["nvidia.com/gpu"], ("gpu-flavor", {"nvidia.com/gpu": 2})),
            cohort="team-ab",
            namespaceSelector={"matchLabels": {"team": "team-a"}},
            preemption={
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            },
        ),
        cq(
            "team-b-cq",
            group(["nvidia.com/gpu"], ("gpu-flavor", {"nvidia.com/gpu": (0, 0, None)})),
            group(["cpu", "memory"], ("default-flavor", {"cpu": 0, "memory": 0})),
            cohort="team-ab",
            namespaceSelector={"matchLabels": {"team": "team-b"}},
        ),
        cq(
            "shared-cq",
            group(["cpu", "memory"], ("default-flavor", {"cpu": 10, "memory": "64Gi"})),
            cohort="team-ab",
        ),
        lq("team-a-queue", "team-a-cq", "team-a"),
        lq("team-b-queue", "team-b-cq", "team-b"),
        wpc("prod", 1000),
    )


def test_seed_004_cohort_borrowing_and_preemption_hint() -> None:
    """Seed 004: team B borrows cpu; team A's 7 cpu does not fit until team B is evicted."""
    s = scheduler(seed_004())
    s.submit(wl("b-job", "team-b-queue", "team-b", t=1, cpu="5"))
    decisions = s.schedule()
    assert admitted(decisions) == ["b-job"]
    gpu_usage = s.cluster_queue_status("team-b-cq")["flavorsUsage"][0]["resources"]
    assert gpu_usage == [{"name": "nvidia.com/gpu", "total": "0", "borrowed": "0"}]
    usage = s.cluster_queue_status("team-b-cq")["flavorsUsage"][1]["resources"][0]
    assert usage == {"name": "cpu", "total": "5", "borrowed": "5"}
    a_job = QueuedWorkload(
        ref=ref("a-job", "team-a"),
        local_queue="team-a-queue",
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": 7000, "nvidia.com/gpu": 2000})],
        queue_time=2,
        priority_class="prod",
    )
    s.submit(a_job)
    decision = pending(s.schedule())["a-job"]
    assert decision.cluster_queue == "team-a-cq"
    assert decision.preemption_may_help
    assert (
        "insufficient unused quota for cpu in flavor default-flavor, 2 more needed"
        in decision.message
    )
    assert ("main", "cpu", "default-flavor") in decision.preempt_flavors
    assert ("default-flavor", "cpu", 7000) in decision.contested  # the whole pod set's need
    s.evict(ref("b-job", "team-b"))
    decisions = s.schedule()
    assert admitted(decisions)[0] == "a-job"
    admission = next(d for d in decisions if isinstance(d, Admission))
    assert admission.priority == 1000
    assert admission.assignments[0].flavors == {
        "cpu": "default-flavor",
        "nvidia.com/gpu": "gpu-flavor",
    }
    assert admission.assignments[0].node_labels == {"accelerator": "nvidia"}
    assert s.quota.violations() == []
