"""The pure admission core (services.admission.scheduler), one rule per test: resolution (a
workload's queues, priority class, namespace and quota, with Kueue's reasons and messages),
config changes, and the assignments a record keeps."""

from __future__ import annotations

import pytest

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
    pending,
    ref,
    scheduler,
    simple,
    wl,
)


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
