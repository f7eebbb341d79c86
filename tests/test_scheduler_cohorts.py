"""The pure admission core (services.admission.scheduler), one rule per test: cohorts
(borrowing and lending limits, a hierarchy's quota) and flavors (their order, taints,
fungibility, resource groups and pod sets)."""

from __future__ import annotations

import pytest

from services.admission.scheduler import Admission
from shared.events import PodSet, Toleration
from tests.scheduler_world import (
    V1,
    admitted,
    config,
    cq,
    flavor,
    group,
    lq,
    pending,
    scheduler,
    wl,
)


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
