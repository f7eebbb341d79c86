"""The cohort tree's quota accounting (shared.quota), checked against Kueue's semantics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from services.preemption.borrowing import BorrowingTree
from shared.config import ClusterQueue, Cohort, parse_object
from shared.quota import QuotaNode, QuotaTree

CPU = ("f", "cpu")


def _quota(nominal: int, borrowing: int | None, lending: int | None) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal}
    if borrowing is not None:
        quota["borrowingLimit"] = borrowing
    if lending is not None:
        quota["lendingLimit"] = lending
    return quota


def cq(
    name: str,
    nominal: int,
    cohort: str = "",
    borrowing: int | None = None,
    lending: int | None = None,
) -> ClusterQueue:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "f", "resources": [_quota(nominal, borrowing, lending)]}],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    obj = parse_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    assert isinstance(obj, ClusterQueue)
    return obj


def cohort(
    name: str,
    parent: str = "",
    nominal: int = 0,
    borrowing: int | None = None,
    lending: int | None = None,
) -> Cohort:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if nominal or borrowing is not None or lending is not None:
        spec["resourceGroups"] = [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "f", "resources": [_quota(nominal, borrowing, lending)]}],
            }
        ]
    obj = parse_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    assert isinstance(obj, Cohort)
    return obj


def k(units: int) -> int:
    return units * 1000


def test_standalone_cq_available_is_nominal_minus_usage() -> None:
    """A ClusterQueue without a cohort has exactly its nominal quota."""
    tree = QuotaTree.build([cq("a", 4)], [])
    assert tree.available("a", *CPU) == k(4)
    tree.add_usage("a", {CPU: k(3)})
    assert tree.available("a", *CPU) == k(1)
    assert tree.borrowed("a") == {}
    assert tree.violations() == []


def test_flat_cohort_borrowing_of_unused_quota() -> None:
    """A ClusterQueue may borrow its cohort peers' unused nominal quota."""
    tree = QuotaTree.build([cq("a", 2, "c"), cq("b", 10, "c")], [])
    assert tree.available("a", *CPU) == k(12)
    tree.add_usage("a", {CPU: k(5)})
    assert tree.borrowed("a") == {CPU: k(3)}
    assert tree.available("b", *CPU) == k(7)
    tree.remove_usage("a", {CPU: k(5)})
    assert tree.available("b", *CPU) == k(12)
    assert tree.cohorts["c"].usage[CPU] == 0


def test_borrowing_limit_caps_borrowing() -> None:
    """borrowingLimit caps how far above nominal a ClusterQueue may go."""
    tree = QuotaTree.build([cq("a", 2, "c", borrowing=1), cq("b", 10, "c")], [])
    assert tree.available("a", *CPU) == k(3)
    assert tree.potential_available("a", *CPU) == k(3)
    tree.add_usage("a", {CPU: k(3)})
    assert tree.available("a", *CPU) == 0
    assert tree.violations() == []


def test_borrowing_limit_zero_means_no_borrowing() -> None:
    """borrowingLimit 0 forbids borrowing altogether."""
    tree = QuotaTree.build([cq("a", 0, "c", borrowing=0), cq("b", 10, "c")], [])
    assert tree.available("a", *CPU) == 0


def test_lending_limit_keeps_guaranteed_quota() -> None:
    """lendingLimit: a ClusterQueue keeps nominal - lendingLimit for itself."""
    tree = QuotaTree.build([cq("a", 10, "c", lending=4), cq("b", 0, "c")], [])
    assert tree.available("b", *CPU) == k(4)
    assert tree.available("a", *CPU) == k(10)
    tree.add_usage("b", {CPU: k(4)})
    assert tree.available("a", *CPU) == k(6)
    tree.add_usage("a", {CPU: k(6)})
    assert tree.available("a", *CPU) == 0
    assert tree.violations() == []
    # The guaranteed part is used locally first and never bubbles into the cohort.
    assert tree.cohorts["c"].usage[CPU] == k(4)


def test_hierarchical_cohort_with_own_quota_and_parent() -> None:
    """Explicit Cohorts add their own quota and lend to their parent's subtree."""
    tree = QuotaTree.build(
        [cq("a", 1, "left"), cq("b", 1, "right")],
        [cohort("root", nominal=2), cohort("left", "root", nominal=3), cohort("right", "root")],
    )
    assert tree.cohorts["root"].subtree[CPU] == k(7)
    assert tree.available("a", *CPU) == k(7)
    tree.add_usage("a", {CPU: k(6)})
    assert tree.available("b", *CPU) == k(1)
    assert tree.violations() == []


def test_cohort_borrowing_limit_in_hierarchy() -> None:
    """A Cohort's borrowingLimit caps what its subtree takes from its parent."""
    tree = QuotaTree.build(
        [cq("a", 1, "left"), cq("b", 10, "right")],
        [cohort("root"), cohort("left", "root", borrowing=2), cohort("right", "root")],
    )
    assert tree.available("a", *CPU) == k(3)
    assert tree.potential_available("a", *CPU) == k(3)


def test_cohort_lending_limit_in_hierarchy() -> None:
    """A Cohort's lendingLimit caps what it lends to its parent's other children."""
    tree = QuotaTree.build(
        [cq("a", 10, "left"), cq("b", 0, "right")],
        [cohort("root"), cohort("left", "root", nominal=5, lending=3), cohort("right", "root")],
    )
    assert tree.available("b", *CPU) == k(3)
    assert tree.available("a", *CPU) == k(15)


def test_cycle_is_detected_and_broken() -> None:
    """Cohorts on a parent cycle are reported; their ClusterQueues are flagged."""
    tree = QuotaTree.build([cq("a", 1, "x")], [cohort("x", "y"), cohort("y", "x")])
    assert tree.in_cycle("a")
    assert tree.cyclic_cohorts == {"x", "y"}


@pytest.mark.parametrize(
    ("usage", "expected"),
    [(k(12), True), (k(13), False)],
)
def test_violations_detect_overuse(usage: int, expected: bool) -> None:
    """violations() reports a root used beyond its subtree quota."""
    tree = QuotaTree.build([cq("a", 2, "c"), cq("b", 10, "c")], [])
    tree.add_usage("a", {CPU: usage})
    assert (tree.violations() == []) is expected
    assert (tree.excess() == {}) is expected


def test_fits_checks_every_resource() -> None:
    """fits() is true only when every (flavor, resource) fits what is available."""
    tree = QuotaTree.build([cq("a", 2)], [])
    assert tree.fits("a", {CPU: k(2)})
    assert not tree.fits("a", {CPU: k(2) + 1})
    assert not tree.fits("missing", {CPU: 1})


def _lending_tree() -> QuotaTree:
    """a keeps 6 of its 10 (lending 4); b keeps nothing (no lending limit); left keeps 7
    of its subtree of 5 + a's 4 lent + b's 1 (lending 3); right has no quota at all."""
    return QuotaTree.build(
        [cq("a", 10, "left", lending=4), cq("b", 1, "left"), cq("c", 2, "right")],
        [cohort("root"), cohort("left", "root", nominal=5, lending=3), cohort("right", "root")],
    )


@pytest.mark.parametrize(
    ("node", "kept", "why"),
    [
        ("a", {CPU: k(6)}, "a lending limit keeps nominal minus it"),
        ("b", {}, "no lending limit: nothing kept, the shortcut holds no entry"),
        ("left", {CPU: k(7)}, "a Cohort keeps its subtree (5 + 4 lent + 1) minus its limit"),
        ("right", {}, "a Cohort without quota keeps nothing"),
    ],
)
def test_kept_is_guaranteed_where_not_zero(node: str, kept: dict[Any, int], why: str) -> None:
    """QuotaNode.kept, read by the usage updates and ``available``, is ``guaranteed`` of
    every flavor-resource where that is not 0."""
    tree = _lending_tree()
    found = tree.cluster_queues.get(node) or tree.cohorts[node]
    assert found.kept == kept, why
    assert found.guaranteed(CPU) == kept.get(CPU, 0), why


def _flat_tree() -> QuotaTree:
    """a and b in one cohort, the root (a lends 4 of 10 and borrows at most 3); c alone."""
    return QuotaTree.build(
        [cq("a", 10, "flat", borrowing=3, lending=4), cq("b", 1, "flat"), cq("c", 2)], []
    )


@pytest.mark.parametrize("build", [_lending_tree, _flat_tree])
@pytest.mark.parametrize(
    ("steps", "why"),
    [
        ([("a", k(5))], "within a's kept quota: nothing reaches its Cohort"),
        ([("a", k(9))], "beyond a's kept quota: the excess goes up"),
        ([("a", k(9)), ("b", k(9)), ("c", k(3))], "every level stores some in its parent"),
        ([("a", k(9)), ("a", -k(2)), ("a", -k(6))], "removals give back to the parent first"),
        ([("b", k(4)), ("a", k(8)), ("b", -k(4)), ("a", -k(8))], "all gone: all zero"),
        ([("a", -k(1)), ("a", k(8))], "usage below zero first (an unknown release)"),
    ],
)
def test_usage_each_node_stores_what_exceeds_kept(
    build: Callable[[], QuotaTree], steps: list[tuple[str, int]], why: str
) -> None:
    """The usage updates' rule, whatever the order of steps: a ClusterQueue's usage is its
    sum; a Cohort's is what its children use beyond their guaranteed quota; and
    ``available`` reads the same as the definition through ``guaranteed``, in a tree of
    three levels (a Cohort's parent asked through a call) and of two (a root read inline)."""
    tree = build()
    for queue, value in steps:
        if value > 0:
            tree.add_usage(queue, {CPU: value})
        else:
            tree.remove_usage(queue, {CPU: -value})
    for queue in ("a", "b", "c"):
        expected = sum(v for q, v in steps if q == queue)
        assert tree.cluster_queues[queue].usage.get(CPU, 0) == expected, why
    for node in tree.cohorts.values():
        name = node.name
        stored = sum(max(0, c.usage.get(CPU, 0) - c.guaranteed(CPU)) for c in node.children)
        assert node.usage.get(CPU, 0) == stored, f"{name}: {why}"
    for queue in ("a", "b", "c"):
        node = tree.cluster_queues[queue]
        assert tree.available(queue, *CPU) == _available_by_definition(node), why


def _available_by_definition(node: QuotaNode) -> int:
    """Kueue's available(), spelled with ``guaranteed`` and ``local_available`` only."""
    if node.parent is None:
        return node.subtree.get(CPU, 0) - node.usage.get(CPU, 0)
    parent_available = _available_by_definition(node.parent)
    quota = node.quotas.get(CPU)
    if quota is not None and quota.borrowing_limit is not None:
        guaranteed = node.guaranteed(CPU)
        stored = node.subtree.get(CPU, 0) - guaranteed
        used = max(0, node.usage.get(CPU, 0) - guaranteed)
        parent_available = min(stored - used + quota.borrowing_limit, parent_available)
    return node.local_available(CPU) + parent_available


def _two_resources(name: str, cohort_name: str, cpu: int, memory: int) -> ClusterQueue:
    """A ClusterQueue with cpu and memory in flavor f, lending half of each to its cohort."""
    resources = [
        {"name": "cpu", "nominalQuota": cpu, "lendingLimit": cpu // 2},
        {"name": "memory", "nominalQuota": memory, "lendingLimit": memory // 2},
    ]
    group = {
        "coveredResources": ["cpu", "memory"],
        "flavors": [{"name": "f", "resources": resources}],
    }
    obj = parse_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"cohort": cohort_name, "resourceGroups": [group]},
        }
    )
    assert isinstance(obj, ClusterQueue)
    return obj


MEMORY = ("f", "memory")


@pytest.mark.parametrize("tree_class", [QuotaTree, BorrowingTree])
@pytest.mark.parametrize(
    ("queue", "amounts", "why"),
    [
        ("a", {CPU: k(3), MEMORY: k(9)}, "two flavor-resources, one within kept, one beyond"),
        ("a", {CPU: k(9), MEMORY: k(3)}, "the first goes up to the cohort, the next starts low"),
        ("a", {CPU: k(9), MEMORY: 0}, "a zero amount is skipped: it makes no usage entry"),
        ("a", {CPU: 0, MEMORY: 0}, "all zero: nothing changes anywhere"),
        ("missing", {CPU: k(1)}, "a ClusterQueue not in the tree: nothing changes"),
    ],
)
def test_one_call_charges_as_one_call_per_flavor_resource(
    tree_class: type[QuotaTree], queue: str, amounts: dict[tuple[str, str], int], why: str
) -> None:
    """add_usage and remove_usage of several flavor-resources at once leave every node as
    one call per non-zero flavor-resource does (each starts again at the ClusterQueue), in
    QuotaTree and in preemption's BorrowingTree; a zero amount touches no node."""
    queues = [_two_resources("a", "co", 6, 10), _two_resources("b", "co", 2, 2)]
    together, alone = tree_class.build(queues, []), tree_class.build(queues, [])
    together.add_usage(queue, amounts)
    for fr, value in amounts.items():
        if value:
            alone.add_usage(queue, {fr: value})

    def usages(tree: QuotaTree) -> dict[str, dict[tuple[str, str], int]]:
        nodes = [*tree.cluster_queues.values(), *tree.cohorts.values()]
        return {node.name: dict(node.usage) for node in nodes}

    assert usages(together) == usages(alone), why
    if not any(amounts.values()) or queue == "missing":
        assert all(not usage for usage in usages(together).values()), why
    together.remove_usage(queue, amounts)
    assert all(v == 0 for usage in usages(together).values() for v in usage.values()), why
