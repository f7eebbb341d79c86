"""The pure admission core (services.admission.scheduler): one rule per test."""

from __future__ import annotations

from typing import Any

import pytest

from services.admission.queues import MINUS_PRIORITY, order_key
from services.admission.scheduler import (
    Admission,
    Inadmissible,
    QueuedWorkload,
    Scheduler,
)
from shared.config import ConfigObject, parse_object
from shared.events import PodSet, Toleration, WorkloadRef
from shared.quantities import parse_quantity

V1 = "kueue.x-k8s.io/v1beta1"


def flavor(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def group(resources: list[str], *flavors: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A resource group; each flavor maps resource -> nominal or (nominal, borrowing, lending)."""
    result = []
    for name, quotas in flavors:
        items = []
        for resource in resources:
            value = quotas.get(resource, 0)
            nominal, borrowing, lending = value if isinstance(value, tuple) else (value, None, None)
            item: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
            if borrowing is not None:
                item["borrowingLimit"] = borrowing
            if lending is not None:
                item["lendingLimit"] = lending
            items.append(item)
        result.append({"name": name, "resources": items})
    return {"coveredResources": resources, "flavors": result}


def cq(name: str, *groups: dict[str, Any], **spec: Any) -> dict[str, Any]:
    spec.setdefault("namespaceSelector", {})
    spec["resourceGroups"] = list(groups)
    return {"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def lq(name: str, cluster_queue: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue, **spec},
    }


def wpc(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def pc(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def config(*documents: dict[str, Any]) -> list[ConfigObject]:
    return [parse_object(document) for document in documents]


def wl(
    name: str,
    queue: str = "user-queue",
    namespace: str = "default",
    t: float = 0.0,
    count: int = 1,
    pod_sets: list[PodSet] | None = None,
    **requests_and_priority: Any,
) -> QueuedWorkload:
    priority_fields = {
        key: requests_and_priority.pop(key)
        for key in ("priority_class", "priority_class_name", "priority")
        if key in requests_and_priority
    }
    requests = {key: parse_quantity(v) for key, v in requests_and_priority.items()}
    return QueuedWorkload(
        ref=WorkloadRef(namespace=namespace, name=name, uid=f"uid-{name}"),
        local_queue=queue,
        pod_sets=pod_sets or [PodSet(name="main", count=count, requests=requests)],
        queue_time=t,
        **priority_fields,
    )


def ref(name: str, namespace: str = "default") -> WorkloadRef:
    return WorkloadRef(namespace=namespace, name=name, uid=f"uid-{name}")


def admitted(decisions: list[Admission | Inadmissible]) -> list[str]:
    return [d.ref.name for d in decisions if isinstance(d, Admission)]


def pending(decisions: list[Admission | Inadmissible]) -> dict[str, Inadmissible]:
    return {d.ref.name: d for d in decisions if isinstance(d, Inadmissible)}


def simple(cpu: Any = 4, strategy: str = "BestEffortFIFO", **spec: Any) -> list[ConfigObject]:
    return config(
        flavor("default-flavor"),
        cq(
            "cq",
            group(["cpu", "memory"], ("default-flavor", {"cpu": cpu, "memory": "64Gi"})),
            queueingStrategy=strategy,
            **spec,
        ),
        lq("user-queue", "cq"),
    )


def scheduler(objects: list[ConfigObject], *workloads: QueuedWorkload) -> Scheduler:
    s = Scheduler()
    s.set_config(objects)
    for w in workloads:
        s.submit(w)
    return s


# --- seed scenarios ------------------------------------------------------------------------


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


# --- resolution ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "workload", "reason", "message"),
    [
        (simple(), wl("w", "nope", cpu="1"), "Inadmissible", "LocalQueue nope doesn't exist"),
        (simple(), wl("w", "", cpu="1"), "Inadmissible", "LocalQueue default doesn't exist"),
        (
            config(lq("user-queue", "ghost")),
            wl("w", cpu="1"),
            "Inadmissible",
            "ClusterQueue ghost doesn't exist",
        ),
        (
            simple(),
            wl("w", cpu="1", priority_class="gold"),
            "Inadmissible",
            "WorkloadPriorityClass gold doesn't exist",
        ),
        (
            simple(),
            wl("w", cpu="1", priority_class_name="high"),
            "Inadmissible",
            "PriorityClass high doesn't exist",
        ),
        (
            simple(stopPolicy="Hold"),
            wl("w", cpu="1"),
            "Inadmissible",
            "ClusterQueue cq is inactive",
        ),
        (
            config(
                flavor("default-flavor"),
                cq("cq", group(["cpu"], ("default-flavor", {"cpu": 4}))),
                lq("user-queue", "cq", stopPolicy="HoldAndDrain"),
            ),
            wl("w", cpu="1"),
            "Inadmissible",
            "LocalQueue user-queue is inactive",
        ),
        (
            config(
                cq("cq", group(["cpu"], ("missing-flavor", {"cpu": 4}))), lq("user-queue", "cq")
            ),
            wl("w", cpu="1"),
            "Inadmissible",
            "ClusterQueue cq is inactive",
        ),
        (
            simple(namespaceSelector=None),
            wl("w", cpu="1"),
            "Pending",
            "Workload namespace doesn't match ClusterQueue selector",
        ),
        (
            simple(namespaceSelector={"matchLabels": {"team": "a"}}),
            wl("w", cpu="1"),
            "Pending",
            "Workload namespace doesn't match ClusterQueue selector",
        ),
        (
            simple(),
            wl("w", pod_sets=[PodSet(name="main", count=1, requests={"nvidia.com/gpu": 1000})]),
            "Pending",
            "couldn't assign flavors to pod set main:"
            " resource nvidia.com/gpu unavailable in ClusterQueue",
        ),
        (
            simple(),
            wl("w", cpu="5"),
            "Pending",
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor"
            " default-flavor, request > maximum capacity (5 > 4)",
        ),
        (
            simple(),
            wl("w", memory="65Gi"),
            "Pending",
            "couldn't assign flavors to pod set main: insufficient quota for memory in flavor"
            " default-flavor, request > maximum capacity (65Gi > 64Gi)",
        ),
    ],
)
def test_inadmissible_reasons(
    objects: list[ConfigObject], workload: QueuedWorkload, reason: str, message: str
) -> None:
    """Each resolution or quota problem yields Kueue's reason and message."""
    s = scheduler(objects, workload)
    decision = pending(s.schedule())["w"]
    assert (decision.reason, decision.message) == (reason, message)
    assert not admitted(s.schedule())


def test_inactive_cluster_queue_status_condition() -> None:
    """A stopped ClusterQueue reports Active=False with reason Stopped."""
    s = scheduler(simple(stopPolicy="Hold"))
    condition = s.cluster_queue_status("cq")["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "Stopped")
    s = scheduler(config(cq("cq", group(["cpu"], ("nope", {"cpu": 1})))))
    condition = s.cluster_queue_status("cq")["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "FlavorNotFound")
    assert "nope" in condition["message"]
    assert scheduler(simple()).cluster_queue_status("cq")["conditions"][0]["status"] == "True"


def test_namespace_without_object_matches_its_name_label() -> None:
    """A namespace with no Namespace object still carries kubernetes.io/metadata.name."""
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["default"]}
        ]
    }
    s = scheduler(simple(namespaceSelector=selector), wl("w", cpu="1"))
    assert admitted(s.schedule()) == ["w"]


def test_config_change_resolves_a_missing_local_queue() -> None:
    """Adding the missing LocalQueue via set_config makes the workload admissible."""
    s = scheduler(
        config(flavor("default-flavor"), cq("cq", group(["cpu"], ("default-flavor", {"cpu": 4}))))
    )
    s.submit(wl("w", cpu="1"))
    assert pending(s.schedule())["w"].message == "LocalQueue user-queue doesn't exist"
    s.set_config(simple())
    assert admitted(s.schedule()) == ["w"]


def test_set_config_never_evicts() -> None:
    """Lowering quota below usage keeps admitted workloads (over-admission is tolerated)."""
    s = scheduler(simple(cpu=4), wl("a", cpu="3", t=1), wl("b", cpu="1", t=2))
    assert admitted(s.schedule()) == ["a", "b"]
    s.set_config(simple(cpu=1))
    assert s.schedule() == []
    assert {v.ref.name: v.state for v in s.workload_views()} == {"a": "admitted", "b": "admitted"}


@pytest.mark.parametrize(
    ("cpu", "shared", "why"),
    [
        ("5", True, "pending (does not fit): the one shared empty value, no list of its own"),
        ("3", False, "admitted: its own flavor assignments, those of its Admission"),
    ],
)
def test_a_record_holds_assignments_only_once_admitted(cpu: str, shared: bool, why: str) -> None:
    s = scheduler(simple(cpu=4), wl("a", cpu=cpu, t=1), wl("b", cpu="5", t=2))
    decisions = s.schedule()
    record, other = s._records["uid-a"], s._records["uid-b"]
    assert (record.assignments is other.assignments) is shared, why
    if not shared:
        (admission,) = [d for d in decisions if isinstance(d, Admission)]
        assert list(record.assignments) == admission.assignments, why
        s.restore_admission(ref("a"), admission.cluster_queue, admission.assignments)
        assert s.generation(ref("a")) == 1, "replaying the same admission changes nothing"


@pytest.mark.parametrize(
    ("second_cpu", "shared", "why"),
    [
        ("1", True, "admitted alike (same pod sets and flavors): one list of assignments"),
        ("2", False, "another request: assignments of their own, in a list of their own"),
    ],
)
def test_workloads_admitted_alike_share_one_list_of_assignments(
    second_cpu: str, shared: bool, why: str
) -> None:
    s = scheduler(simple(cpu=4), wl("a", cpu="1", t=1), wl("b", cpu=second_cpu, t=2))
    first, second = (d for d in s.schedule() if isinstance(d, Admission))
    assert (first.assignments is second.assignments) is shared, why
    assert s._records["uid-a"].assignments is first.assignments, "the record keeps that list"
    assert [a.usage for a in second.assignments] == [{"cpu": parse_quantity(second_cpu)}], why


# --- priorities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"priority_class": "wpc", "priority_class_name": "pc", "priority": 7}, 500),
        ({"priority_class_name": "pc", "priority": 7}, 300),
        ({"priority": 7}, 7),
        ({}, 50),
    ],
)
def test_priority_resolution_order(fields: dict[str, Any], expected: int) -> None:
    """WorkloadPriorityClass, then PriorityClass, then direct priority, then globalDefault."""
    objects = simple() + config(wpc("wpc", 500), pc("pc", 300), pc("default", 50, default=True))
    s = scheduler(objects, wl("w", cpu="1", **fields))
    decision = s.schedule()[0]
    assert isinstance(decision, Admission)
    assert decision.priority == expected


def test_priority_defaults_to_zero() -> None:
    """Without any class or globalDefault the priority is 0."""
    s = scheduler(simple(), wl("w", cpu="1"))
    assert s.workload_views()[0].priority == 0


def test_set_config_re_resolves_pending_priorities() -> None:
    """A WorkloadPriorityClass added later makes its pending workloads admissible."""
    s = scheduler(simple(), wl("w", cpu="1", priority_class="gold"))
    assert "gold" in pending(s.schedule())["w"].message
    s.set_config(simple() + config(wpc("gold", 9)))
    decision = s.schedule()[0]
    assert isinstance(decision, Admission) and decision.priority == 9


# --- ordering and queueing strategies ---------------------------------------------------------


def test_order_priority_then_queue_time_then_uid() -> None:
    """Higher priority first, then older, then uid."""
    s = scheduler(
        simple(cpu=3, strategy="StrictFIFO"),
        wl("late", cpu="1", t=5, priority=1),
        wl("old", cpu="1", t=1),
        wl("high", cpu="1", t=9, priority=10),
        wl("b-same", cpu="1", t=2),
        wl("a-same", cpu="1", t=2),
    )
    assert admitted(s.schedule()) == ["high", "late", "old"]
    positions = {v.ref.name: v.position_in_cluster_queue for v in s.workload_views()}
    assert positions["a-same"] == 0 and positions["b-same"] == 1


@pytest.mark.parametrize(
    ("priority", "why"),
    [
        (300, "beyond the ints Python keeps once: the keys share the one negated value"),
        (-1000, "a negative priority too"),
        (5, "-5 is an int Python keeps once anyway: the table changes nothing"),
    ],
)
def test_keys_share_their_negated_priority(priority: int, why: str) -> None:
    first = order_key(priority, 1.0, "uid-a")
    second = order_key(int(str(priority)), 2.0, "uid-b")  # an equal int, not the same one
    assert first[MINUS_PRIORITY] == -priority, why
    assert first[MINUS_PRIORITY] is second[MINUS_PRIORITY], why
    assert first < second, "still ordered by queue time among equals"


def test_strict_fifo_head_blocks_the_queue() -> None:
    """StrictFIFO: a head that does not fit blocks smaller workloads behind it."""
    s = scheduler(
        simple(cpu=4, strategy="StrictFIFO"),
        wl("a", cpu="3", t=1),
        wl("big", cpu="4", t=2),
        wl("small", cpu="1", t=3),
    )
    decisions = s.schedule()
    assert admitted(decisions) == ["a"]
    assert set(pending(decisions)) == {"big"}
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["big"]


def test_best_effort_fifo_lets_smaller_ones_pass() -> None:
    """BestEffortFIFO: a head that does not fit steps aside for later ones that do."""
    s = scheduler(
        simple(cpu=4), wl("a", cpu="3", t=1), wl("big", cpu="4", t=2), wl("small", cpu="1", t=3)
    )
    decisions = s.schedule()
    assert admitted(decisions) == ["a", "small"]
    assert set(pending(decisions)) == {"big"}


def test_parked_workload_is_retried_after_quota_release() -> None:
    """A parked BestEffortFIFO workload is retried once quota is released."""
    s = scheduler(simple(cpu=4), wl("a", cpu="4", t=1), wl("b", cpu="4", t=2))
    s.schedule()
    assert s.schedule() == []
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b"]


def test_new_higher_priority_workload_unblocks_strict_fifo() -> None:
    """A new head in a blocked StrictFIFO queue is tried at once."""
    s = scheduler(
        simple(cpu=4, strategy="StrictFIFO"), wl("a", cpu="3", t=1), wl("big", cpu="4", t=2)
    )
    s.schedule()
    s.submit(wl("urgent", cpu="1", t=3, priority=5))
    assert admitted(s.schedule()) == ["urgent"]


def test_boost_reorders_pending() -> None:
    """set_boost raises the effective priority of a pending workload."""
    s = scheduler(
        simple(cpu=1, strategy="StrictFIFO"),
        wl("x", cpu="2", t=0),
        wl("a", cpu="1", t=1),
        wl("b", cpu="1", t=2),
    )
    s.schedule()
    s.set_boost(ref("b"), 10)
    view = {v.ref.name: v for v in s.workload_views()}
    assert view["b"].effective_priority == 10 and view["b"].priority == 0
    assert admitted(s.schedule()) == ["b"]


def test_decisions_are_emitted_only_on_change() -> None:
    """An unchanged pending reason is not emitted twice."""
    s = scheduler(simple(cpu=1), wl("a", cpu="1", t=1), wl("b", cpu="1", t=2))
    assert set(pending(s.schedule())) == {"b"}
    s.submit(wl("c", cpu="1", t=3))
    assert set(pending(s.schedule())) == {"c"}
    s.set_config(simple(cpu=1))
    assert s.schedule() == []


def test_one_pass_admits_across_cluster_queues_in_priority_order() -> None:
    """One pass admits everything that fits across queues, highest priority first."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 2})), cohort="c"),
        cq("y", group(["cpu"], ("f", {"cpu": 0})), cohort="c"),
        lq("qx", "x"),
        lq("qy", "y"),
    )
    s = scheduler(
        objects,
        wl("low", "qx", cpu="1", t=1),
        wl("high", "qy", cpu="1", t=2, priority=9),
        wl("mid", "qx", cpu="1", t=3, priority=5),
    )
    assert admitted(s.schedule()) == ["mid", "low"]


def test_non_borrowing_heads_go_first() -> None:
    """Among heads, one that needs no borrowing is admitted before a borrowing one."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 1})), cohort="c"),
        cq("y", group(["cpu"], ("f", {"cpu": 1})), cohort="c"),
        lq("qx", "x"),
        lq("qy", "y"),
    )
    s = scheduler(
        objects, wl("borrower", "qx", cpu="2", t=1, priority=9), wl("modest", "qy", cpu="1", t=2)
    )
    assert admitted(s.schedule()) == ["modest"]


def test_strict_fifo_not_broken_by_global_order() -> None:
    """Within a StrictFIFO queue nothing passes a blocked head even with other queues active."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 2})), queueingStrategy="StrictFIFO"),
        cq("y", group(["cpu"], ("f", {"cpu": 2}))),
        lq("qx", "x"),
        lq("qy", "y"),
    )
    s = scheduler(
        objects,
        wl("x-big", "qx", cpu="3", t=1),
        wl("x-small", "qx", cpu="1", t=2),
        wl("y", "qy", cpu="1", t=3),
    )
    assert admitted(s.schedule()) == ["y"]


# --- cohorts and flavors ------------------------------------------------------------------


def test_borrowing_limit_is_respected() -> None:
    """A ClusterQueue borrows at most its borrowingLimit."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": (1, 1, None)})), cohort="c"),
        cq("y", group(["cpu"], ("f", {"cpu": 10})), cohort="c"),
        lq("qx", "x"),
    )
    s = scheduler(objects, wl("a", "qx", cpu="2", t=1), wl("b", "qx", cpu="1", t=2))
    decisions = s.schedule()
    assert admitted(decisions) == ["a"]
    assert "1 more needed" in pending(decisions)["b"].message


def test_lending_limit_is_respected() -> None:
    """Only lendingLimit of a peer's quota can be borrowed."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 0})), cohort="c"),
        cq("y", group(["cpu"], ("f", {"cpu": (10, None, 3)})), cohort="c"),
        lq("qx", "x"),
    )
    s = scheduler(objects, wl("a", "qx", cpu="3", t=1), wl("b", "qx", cpu="1", t=2))
    assert admitted(s.schedule()) == ["a"]


def test_hierarchical_cohort_quota_is_borrowable() -> None:
    """An explicit Cohort's own quota can be borrowed by ClusterQueues below it."""
    objects = config(
        flavor("f"),
        {
            "apiVersion": V1,
            "kind": "Cohort",
            "metadata": {"name": "root"},
            "spec": {"resourceGroups": [group(["cpu"], ("f", {"cpu": 5}))]},
        },
        {
            "apiVersion": V1,
            "kind": "Cohort",
            "metadata": {"name": "mid"},
            "spec": {"parentName": "root"},
        },
        cq("x", group(["cpu"], ("f", {"cpu": 1})), cohort="mid"),
        lq("qx", "x"),
    )
    s = scheduler(objects, wl("a", "qx", cpu="6", t=1), wl("b", "qx", cpu="1", t=2))
    assert admitted(s.schedule()) == ["a"]
    assert s.cluster_queue_status("x")["flavorsUsage"][0]["resources"][0]["borrowed"] == "5"


def test_flavors_tried_in_order() -> None:
    """The first flavor with room is taken; a full one is skipped."""
    objects = config(
        flavor("on-demand", nodeLabels={"kind": "on-demand"}),
        flavor(
            "spot",
            nodeLabels={"kind": "spot"},
            nodeTaints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}],
            tolerations=[
                {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
            ],
        ),
        cq("cq", group(["cpu"], ("on-demand", {"cpu": 2}), ("spot", {"cpu": 4}))),
        lq("user-queue", "cq"),
    )
    s = scheduler(objects, wl("a", cpu="2", t=1), wl("b", cpu="3", t=2))
    decisions = [d for d in s.schedule() if isinstance(d, Admission)]
    assert [d.assignments[0].flavors["cpu"] for d in decisions] == ["on-demand", "spot"]
    assert decisions[1].assignments[0].node_labels == {"kind": "spot"}
    assert decisions[1].assignments[0].tolerations == [
        Toleration(key="spot", value="true", effect="NoSchedule")
    ]


def test_untolerated_taint_skips_flavor() -> None:
    """A flavor tainted NoSchedule without a matching toleration is never assigned."""
    objects = config(
        flavor("tainted", nodeTaints=[{"key": "gpu", "effect": "NoSchedule"}]),
        cq("cq", group(["cpu"], ("tainted", {"cpu": 4}))),
        lq("user-queue", "cq"),
    )
    s = scheduler(objects, wl("w", cpu="1"))
    assert (
        "untolerated taint gpu:NoSchedule in flavor tainted" in pending(s.schedule())["w"].message
    )


@pytest.mark.parametrize(
    ("policy", "expected"), [("MayStopSearch", "first"), ("TryNextFlavor", "second")]
)
def test_flavor_fungibility_when_can_borrow(policy: str, expected: str) -> None:
    """whenCanBorrow: MayStopSearch borrows on flavor 1; TryNextFlavor prefers not borrowing."""
    objects = config(
        flavor("first"),
        flavor("second"),
        cq(
            "x",
            group(["cpu"], ("first", {"cpu": 1}), ("second", {"cpu": 4})),
            cohort="c",
            flavorFungibility={"whenCanBorrow": policy},
        ),
        cq("y", group(["cpu"], ("first", {"cpu": 4})), cohort="c"),
        lq("user-queue", "x"),
    )
    s = scheduler(objects, wl("w", cpu="2"))
    decision = s.schedule()[0]
    assert isinstance(decision, Admission)
    assert decision.assignments[0].flavors == {"cpu": expected}


def test_multiple_resource_groups_and_pod_sets() -> None:
    """Each resource group gets its own flavor; pod sets accumulate usage."""
    objects = config(
        flavor("cpu-f"),
        flavor("gpu-f"),
        cq(
            "cq",
            group(["cpu"], ("cpu-f", {"cpu": 3})),
            group(["nvidia.com/gpu"], ("gpu-f", {"nvidia.com/gpu": 4})),
        ),
        lq("user-queue", "cq"),
    )
    pod_sets = [
        PodSet(name="head", count=1, requests={"cpu": 1000}),
        PodSet(name="workers", count=2, requests={"cpu": 1000, "nvidia.com/gpu": 2000}),
    ]
    s = scheduler(objects, wl("w", pod_sets=pod_sets))
    decision = s.schedule()[0]
    assert isinstance(decision, Admission)
    assert decision.assignments[1].usage == {"cpu": 2000, "nvidia.com/gpu": 4000}
    assert decision.assignments[1].flavors == {"cpu": "cpu-f", "nvidia.com/gpu": "gpu-f"}
    s.submit(
        wl(
            "v",
            pod_sets=[
                PodSet(name="a", count=1, requests={"cpu": 0}),
                PodSet(name="b", count=1, requests={"nvidia.com/gpu": 1000}),
            ],
        )
    )
    message = pending(s.schedule())["v"].message
    assert message.startswith(
        "couldn't assign flavors to pod set b: insufficient unused quota for nvidia.com/gpu"
    )


# --- lifecycle ---------------------------------------------------------------------------


def test_submit_is_idempotent() -> None:
    """A duplicate submit changes nothing."""
    s = scheduler(simple(cpu=1), wl("a", cpu="1"))
    s.submit(wl("a", cpu="1"))
    assert admitted(s.schedule()) == ["a"]
    s.submit(wl("a", cpu="1"))
    assert s.schedule() == []


def test_evict_keeps_queue_time_and_increments_generation() -> None:
    """Eviction keeps the original queue time; re-admission bumps the generation."""
    s = scheduler(
        simple(cpu=1, strategy="StrictFIFO"),
        wl("a", cpu="1", t=5),
        wl("b", cpu="1", t=1, priority=-1),
    )
    assert admitted(s.schedule()) == ["a"]
    assert s.generation(ref("a")) == 1
    s.evict(ref("a"))
    assert admitted(s.schedule()) == ["a"]
    assert s.generation(ref("a")) == 2


def test_restore_admission_is_idempotent_and_charges_quota() -> None:
    """A replayed admission charges quota once and emits nothing."""
    s = scheduler(simple(cpu=2))
    first = scheduler(simple(cpu=2), wl("a", cpu="2"))
    admission = first.schedule()[0]
    assert isinstance(admission, Admission)
    for _ in range(2):
        s.restore_admission(ref("a"), "cq", admission.assignments)
    s.submit(wl("a", cpu="2"))
    s.submit(wl("b", cpu="1", t=1))
    decisions = s.schedule()
    assert admitted(decisions) == [] and set(pending(decisions)) == {"b"}
    assert s.cluster_queue_status("cq")["admittedWorkloads"] == 1
    assert s.generation(ref("a")) == 1
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b"]


def test_restore_admission_replay_counts_generations() -> None:
    """Replaying admit, evict, admit yields generation 2; an explicit generation wins."""
    s = scheduler(simple(cpu=2), wl("a", cpu="1"))
    admission = s.schedule()[0]
    assert isinstance(admission, Admission)
    replay = scheduler(simple(cpu=2), wl("a", cpu="1"))
    replay.restore_admission(ref("a"), "cq", admission.assignments)
    replay.evict(ref("a"))
    replay.restore_admission(ref("a"), "cq", admission.assignments)
    assert replay.generation(ref("a")) == 2
    assert replay.schedule() == []
    replay.restore_admission(ref("a"), "cq", admission.assignments, generation=5)
    assert replay.generation(ref("a")) == 5


def test_delete_releases_quota_and_forgets() -> None:
    """delete releases an admitted workload's quota and drops pending ones."""
    s = scheduler(
        simple(cpu=1), wl("a", cpu="1", t=1), wl("b", cpu="1", t=2), wl("c", cpu="1", t=3)
    )
    s.schedule()
    s.delete(ref("b"))
    s.delete(ref("a"))
    assert admitted(s.schedule()) == ["c"]
    assert {v.ref.name for v in s.workload_views()} == {"c"}


def test_statuses_and_views() -> None:
    """ClusterQueue/LocalQueue status and workload views carry counts, usage and positions."""
    s = scheduler(
        simple(cpu=2),
        wl("a", cpu="2", memory="1Gi", t=1),
        wl("b", cpu="1", t=2),
        wl("c", cpu="1", t=3),
    )
    s.schedule()
    status = s.cluster_queue_status("cq")
    assert status["pendingWorkloads"] == 2 and status["admittedWorkloads"] == 1
    assert status["flavorsUsage"] == [
        {
            "name": "default-flavor",
            "resources": [
                {"name": "cpu", "total": "2", "borrowed": "0"},
                {"name": "memory", "total": "1Gi", "borrowed": "0"},
            ],
        }
    ]
    lq_status = s.local_queue_status("default", "user-queue")
    assert lq_status["pendingWorkloads"] == 2 and lq_status["admittedWorkloads"] == 1
    assert lq_status["flavorsUsage"][0]["resources"][1] == {"name": "memory", "total": "1Gi"}
    views = {v.ref.name: v for v in s.workload_views()}
    assert views["a"].state == "admitted" and views["a"].generation == 1
    assert (views["b"].position_in_cluster_queue, views["c"].position_in_local_queue) == (0, 1)
    assert views["b"].reason == "Pending"
    s.finish(ref("a"))
    assert {v.ref.name: v.state for v in s.workload_views()}["a"] == "finished"


def test_reservation_holds_released_quota_for_a_starving_workload() -> None:
    """A reserved workload goes first and, while it does not fit, small ones cannot pass it."""
    s = scheduler(simple(cpu=4), wl("running", cpu=3, t=0))
    assert admitted(s.schedule()) == ["running"]
    s.submit(wl("big", cpu=4, t=1))
    s.submit(wl("small", cpu=1, t=2, priority=5))
    assert admitted(s.schedule()) == ["small"]  # best effort: small passes the big one
    s.finish(ref("small"))
    s.set_boost(ref("big"), 0, reserved=True)
    s.submit(wl("small-2", cpu=1, t=3, priority=5))
    assert admitted(s.schedule()) == []  # held back: the reservation collects freed quota
    s.finish(ref("running"))
    assert admitted(s.schedule()) == ["big"]
    s.set_boost(ref("big"), 0, reserved=False)
    s.finish(ref("big"))
    assert admitted(s.schedule()) == ["small-2"]


def test_hold_and_drain_lists_admitted_workloads_for_eviction() -> None:
    """HoldAndDrain stops admission and names what the queue has admitted, with Kueue's reason."""
    s = scheduler(simple(cpu=4), wl("a", cpu=1, t=0), wl("b", cpu=1, t=1))
    assert admitted(s.schedule()) == ["a", "b"]
    assert s.draining() == []
    objects = simple(cpu=4, stopPolicy="HoldAndDrain")
    s.set_config(objects)
    assert sorted((r.name, cq, reason) for r, cq, reason in s.draining()) == [
        ("a", "cq", "ClusterQueueStopped"),
        ("b", "cq", "ClusterQueueStopped"),
    ]
    s.evict(ref("a"))
    s.submit(wl("c", cpu=1, t=2))
    assert admitted(s.schedule()) == []  # held: nothing new is admitted
    s.set_config(simple(cpu=4, stopPolicy="Hold"))
    assert s.draining() == []  # Hold lets admitted workloads run to completion


def test_nominated_preemptor_gets_the_room_its_victims_free() -> None:
    """Room freed by evicting a preemptor's victims goes to it, even before a reservation."""
    s = scheduler(simple(cpu=2), wl("victim", cpu=2, t=0, priority=1))
    assert admitted(s.schedule()) == ["victim"]
    s.submit(wl("starving", cpu=2, t=1, priority=1))
    s.set_boost(ref("starving"), 10, reserved=True)
    s.submit(wl("preemptor", cpu=2, t=2, priority=100))
    s.schedule()
    s.nominate(ref("preemptor"))
    s.evict(ref("victim"))
    assert admitted(s.schedule()) == ["preemptor"]


def test_a_nomination_that_still_does_not_fit_stops_blocking_when_it_ends() -> None:
    """A nominated preemptor holds its queue only while its victims leave."""
    s = scheduler(simple(cpu=4), wl("running", cpu=3, t=0))
    assert admitted(s.schedule()) == ["running"]
    s.submit(wl("preemptor", cpu=4, t=1, priority=100))
    s.submit(wl("small", cpu=1, t=2))
    s.nominate(ref("preemptor"))
    assert admitted(s.schedule()) == []  # its room is coming: nothing else takes it
    s.unnominate(ref("preemptor"))
    assert admitted(s.schedule()) == ["small"]  # best effort again


def test_same_shaped_workloads_share_a_failure_until_usage_changes() -> None:
    """Scheduling equivalence: identical workloads are judged once per usage state; a
    later one, after an admission changed the usage, gets its own (current) numbers."""
    s = scheduler(
        simple(cpu=10),
        wl("running", cpu="8", t=0, priority=100),
        wl("b1", cpu="4", t=1, priority=10),
        wl("b2", cpu="4", t=2, priority=10),
        wl("d", cpu="1", t=3, priority=5),
        wl("c", cpu="4", t=4, priority=1),
    )
    decisions = s.schedule()
    assert admitted(decisions) == ["running", "d"]
    reasons = pending(decisions)
    assert "2 more needed" in reasons["b1"].message
    assert reasons["b2"].message == reasons["b1"].message
    assert "3 more needed" in reasons["c"].message


def berth_configuration(**admission: Any) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "Configuration",
        "metadata": {"name": "berth"},
        "spec": {"admission": admission},
    }


def _cohort_with_a_waiter(waiter: QueuedWorkload, **admission: Any) -> Scheduler:
    """Cohort c: a and b with 4 CPU each. a-run (2) and b-run (3) are admitted; then
    ``waiter`` (4 CPU) waits in a, which has only 3 CPU it could use."""
    documents = [
        flavor("f"),
        cq("a", group(["cpu"], ("f", {"cpu": 4})), cohort="c"),
        cq("b", group(["cpu"], ("f", {"cpu": 4})), cohort="c"),
        lq("qa", "a"),
        lq("qb", "b"),
    ]
    if admission:
        documents.append(berth_configuration(**admission))
    s = scheduler(
        config(*documents), wl("a-run", "qa", cpu="2", t=1), wl("b-run", "qb", cpu="3", t=2)
    )
    assert admitted(s.schedule()) == ["a-run", "b-run"]
    s.submit(waiter)
    assert "1 more needed" in pending(s.schedule())[waiter.ref.name].message
    return s


def _yield_setup(yields: bool) -> Scheduler:
    admission = {"borrowingYieldsToHigherPriority": True} if yields else {}
    return _cohort_with_a_waiter(wl("big", "qa", cpu="4", t=3, priority=10), **admission)


def test_by_default_a_lower_priority_workload_borrows_the_room_a_higher_one_waits_for() -> None:
    """Kueue's BestEffortFIFO: whatever fits is admitted."""
    s = _yield_setup(yields=False)
    s.submit(wl("borrower", "qb", cpu="2", t=4))
    assert admitted(s.schedule()) == ["borrower"]


def test_borrowing_yields_to_a_waiting_higher_priority_workload() -> None:
    """Opt-in: a lower-priority workload may use its own nominal quota, not borrow the room a
    higher-priority one of the cohort waits for; it is retried when that one is admitted."""
    s = _yield_setup(yields=True)
    s.submit(wl("borrower", "qb", cpu="2", t=4))
    s.submit(wl("own", "qb", cpu="1", t=5))
    decisions = s.schedule()
    assert admitted(decisions) == ["own"]
    assert "priority 10 waits for quota in cohort c" in pending(decisions)["borrower"].message
    s.finish(ref("a-run"))
    assert admitted(s.schedule()) == ["big"]
    s.finish(ref("b-run"))
    assert admitted(s.schedule()) == ["borrower"]


def test_borrowing_does_not_yield_to_an_equal_priority() -> None:
    s = _yield_setup(yields=True)
    s.submit(wl("peer", "qb", cpu="2", t=4, priority=10))
    assert admitted(s.schedule()) == ["peer"]


# Larges (priority 200) are due 1 s after creation, everything else 25 s after.
TARGETS: list[dict[str, Any]] = [{"minPriority": 200, "wait": "1s"}, {"wait": "25s"}]


def one_at_a_time(targets: list[dict[str, Any]], *queued: tuple[str, float, int]) -> list[str]:
    """The order in which ``queued`` (name, queue time, priority), each taking the whole
    4 CPU ClusterQueue, get in, one finishing after the other."""
    objects = simple(cpu=4) + config(berth_configuration(waitTargets=targets))
    s = scheduler(objects, wl("running", cpu="4", t=0))
    assert admitted(s.schedule()) == ["running"]
    for name, t, priority in queued:
        s.submit(wl(name, cpu="4", t=t, priority=priority))
    assert admitted(s.schedule()) == []
    order: list[str] = []
    for _ in queued:
        s.finish(ref(order[-1] if order else "running"))
        order += admitted(s.schedule())
    return order


def test_wait_targets_order_by_deadline_not_priority() -> None:
    """An old low-priority workload is due before a large created 30 s later, and goes first;
    a large created before it was due goes before it."""
    order = one_at_a_time(
        TARGETS,
        ("old-small", 1, 50),  # due at 26
        ("late-large", 30, 200),  # due at 31
        ("early-large", 20, 200),  # due at 21
    )
    assert order == ["early-large", "old-small", "late-large"]


def test_a_workload_no_target_covers_queues_after_every_covered_one() -> None:
    order = one_at_a_time(
        [{"minPriority": 100, "wait": "10s"}],
        ("uncovered-high", 1, 99),
        ("uncovered-low", 0, 1),
        ("covered", 50, 100),  # due at 60
    )
    assert order == ["covered", "uncovered-high", "uncovered-low"]


def test_with_wait_targets_borrowing_yields_to_an_earlier_deadline() -> None:
    """Yielding goes by deadline: a large created at 30 (due at 31) does not borrow the room
    a small due at 28 waits for, though its priority is higher."""
    s = _cohort_with_a_waiter(
        wl("small", "qa", cpu="4", t=3, priority=50),  # due at 28
        borrowingYieldsToHigherPriority=True,
        waitTargets=TARGETS,
    )
    s.submit(wl("late-large", "qb", cpu="2", t=30, priority=200))  # would borrow 1 CPU
    decisions = s.schedule()
    assert admitted(decisions) == []
    assert "priority 50 due earlier waits for quota in cohort c" in (
        pending(decisions)["late-large"].message
    )
    s.finish(ref("a-run"))
    assert admitted(s.schedule()) == ["small"]
    s.finish(ref("b-run"))
    assert admitted(s.schedule()) == ["late-large"]


def test_parked_workloads_of_one_shape_are_retried_one_after_another() -> None:
    """A release retries the first parked workload of each shape; each admission releases
    the next of its shape, so everything that fits still gets in, in queue order."""
    s = scheduler(simple(cpu=4), wl("a", cpu="4", t=1))
    assert admitted(s.schedule()) == ["a"]
    for name, cpu, t in [("b1", "1", 2), ("b2", "1", 3), ("c", "2", 4), ("b3", "1", 5)]:
        s.submit(wl(name, cpu=cpu, t=t))
    assert admitted(s.schedule()) == []
    views = {v.ref.name: v for v in s.workload_views()}
    assert [views[n].position_in_cluster_queue for n in ("b1", "b2", "c", "b3")] == [0, 1, 2, 3]
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b1", "b2", "c"]
    s.finish(ref("c"))
    assert admitted(s.schedule()) == ["b3"]
