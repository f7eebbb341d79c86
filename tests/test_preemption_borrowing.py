"""The index of borrowing ClusterQueues (services/preemption/borrowing.py): after any usage
change, a BorrowingTree names the same lenders as asking every queue of the cohort tree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.preemption.borrowing import BorrowingTree, hierarchical, lenders
from shared.config import ClusterQueue, Cohort
from shared.quota import FlavorResource, QuotaTree
from tests.victims_search import cohort, cq

CPU: FlavorResource = ("f", "cpu")
GPU: FlavorResource = ("f", "gpu")
BOTH = frozenset({CPU, GPU})

# Cohort "c" (a, b, d: 4 CPU and 2 GPU nominal each), "e" in cohort "other", "alone" in none;
# hierarchical: "h1" under cohort "x", "h2" under "y", both under "root".
QUEUES = [
    cq("a", {"f/cpu": 4, "f/gpu": 2}, "c"),
    cq("b", {"f/cpu": 4, "f/gpu": 2}, "c"),
    cq("d", {"f/cpu": 4, "f/gpu": 2}, "c"),
    cq("e", {"f/cpu": 4}, "other"),
    cq("alone", {"f/cpu": 4}),
    cq("h1", {"f/cpu": 4}, "x"),
    cq("h2", {"f/cpu": 4}, "y"),
]
COHORTS = [cohort("root"), cohort("x", "root"), cohort("y", "root")]

Step = tuple[str, str, FlavorResource, int]  # ("add" | "remove", queue, flavor-resource, units)


@dataclass
class Case:
    why: str
    steps: list[Step]  # applied after the index was first read, each followed by a read
    asker: str
    contested: frozenset[FlavorResource]
    expected: set[str]


CASES = {
    "over_nominal_after_first_read": Case(
        "A queue that goes over nominal after the index was read is a lender: its change is"
        " not missed (the index is not reused as it was).",
        [("add", "b", CPU, 5)],
        "a",
        frozenset({CPU}),
        {"b"},
    ),
    "at_nominal_is_not_borrowing": Case(
        "Exactly at nominal is not borrowing.",
        [("add", "b", CPU, 4)],
        "a",
        frozenset({CPU}),
        set(),
    ),
    "back_under_nominal": Case(
        "A queue back at nominal stops lending (a removal is a change too).",
        [("add", "b", CPU, 6), ("remove", "b", CPU, 2)],
        "a",
        frozenset({CPU}),
        set(),
    ),
    "other_resource": Case(
        "Borrowing in a flavor-resource that is not contested does not make a lender.",
        [("add", "b", GPU, 3)],
        "a",
        frozenset({CPU}),
        set(),
    ),
    "any_contested_resource": Case(
        "Borrowing in any one contested flavor-resource makes a lender.",
        [("add", "b", GPU, 3), ("add", "d", CPU, 9)],
        "a",
        BOTH,
        {"b", "d"},
    ),
    "never_itself": Case(
        "The asking queue is never its own lender.",
        [("add", "a", CPU, 6), ("add", "b", CPU, 6)],
        "a",
        frozenset({CPU}),
        {"b"},
    ),
    "other_cohort": Case(
        "A queue borrowing in another cohort is no lender.",
        [("add", "e", CPU, 6)],
        "a",
        frozenset({CPU}),
        set(),
    ),
    "no_cohort": Case(
        "A queue in no cohort has no lenders.",
        [("add", "b", CPU, 6), ("add", "alone", CPU, 3)],
        "alone",
        frozenset({CPU}),
        set(),
    ),
    "whole_cohort_tree": Case(
        "Hierarchical cohorts: a queue borrowing anywhere under the root is a lender.",
        [("add", "h2", CPU, 6)],
        "h1",
        frozenset({CPU}),
        {"h2"},
    ),
    "search_and_restore": Case(
        "Taken out and put back, as a search's simulation does: as before.",
        [("add", "b", CPU, 6), ("remove", "b", CPU, 6), ("add", "b", CPU, 6)],
        "a",
        frozenset({CPU}),
        {"b"},
    ),
}


def _trees(
    queues: Sequence[ClusterQueue] = QUEUES, cohorts: Sequence[Cohort] = COHORTS
) -> tuple[BorrowingTree, QuotaTree]:
    return BorrowingTree.build(queues, cohorts), QuotaTree.build(queues, cohorts)


def _apply(tree: QuotaTree, step: Step) -> None:
    action, queue, fr, units = step
    if action == "add":
        tree.add_usage(queue, {fr: units * 1000})
    else:
        tree.remove_usage(queue, {fr: units * 1000})


@pytest.mark.parametrize("name", CASES)
def test_lenders(name: str) -> None:
    case = CASES[name]
    indexed, plain = _trees()
    assert list(lenders(indexed, case.asker, case.contested)) == []  # read before the steps
    for step in case.steps:
        _apply(indexed, step)
        _apply(plain, step)
        lenders(indexed, case.asker, case.contested)  # and after each: it must not go stale
    assert set(lenders(indexed, case.asker, case.contested)) == case.expected, case.why
    assert set(lenders(plain, case.asker, case.contested)) == case.expected, case.why


NAMES = [q.metadata.name for q in QUEUES]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAMES),
            st.sampled_from([CPU, GPU]),
            st.integers(1, 5),
            st.booleans(),  # read the index after this step
        ),
        max_size=30,
    ),
    st.sampled_from(NAMES),
    st.sampled_from([frozenset({CPU}), frozenset({GPU}), BOTH]),
)
def test_index_answers_as_asking_every_queue(
    steps: list[tuple[str, FlavorResource, int, bool]],
    asker: str,
    contested: frozenset[FlavorResource],
) -> None:
    """Whatever the changes and whenever the index is read in between, its lenders are those
    found by asking each queue of the cohort tree."""
    indexed, plain = _trees()
    charged: dict[tuple[str, FlavorResource], int] = {}
    for queue, fr, units, read in steps:
        # Remove only what was added (as the service does): usage never goes negative.
        if charged.get((queue, fr), 0) >= units and units % 2 == 0:
            step: Step = ("remove", queue, fr, units)
            charged[(queue, fr)] -= units
        else:
            step = ("add", queue, fr, units)
            charged[(queue, fr)] = charged.get((queue, fr), 0) + units
        _apply(indexed, step)
        _apply(plain, step)
        if read:
            for name in NAMES:
                assert set(lenders(indexed, name, contested)) == set(
                    lenders(plain, name, contested)
                )
    assert set(lenders(indexed, asker, contested)) == set(lenders(plain, asker, contested))


# A ClusterQueue alone named as the hierarchical tree's root Cohort ("root"), and a flat
# cohort whose name is that of a hierarchical one's child ("x" there is a Cohort of "root").
SHAPES = [*QUEUES, cq("root", {"f/cpu": 4}), cq("flat", {"f/cpu": 4}, "x2")]


@pytest.mark.parametrize(
    ("queue", "expected", "why"),
    [
        ("h1", True, "under Cohort x under Cohort root: two levels of Cohorts"),
        ("h2", True, "another ClusterQueue of the same hierarchical tree"),
        ("a", False, "a flat cohort: ClusterQueues only under its root"),
        ("alone", False, "in no cohort: its own root, with no children"),
        ("root", False, "alone, though named as the hierarchical root: told apart by identity"),
        ("flat", False, "a flat cohort beside the hierarchical tree"),
    ],
)
def test_hierarchical_is_asked_once_per_tree(queue: str, expected: bool, why: str) -> None:
    """borrowing.hierarchical answers from the roots a BorrowingTree found at its build as
    is_hierarchical does by looking at the root's children (a plain QuotaTree)."""
    indexed, plain = _trees(SHAPES)
    assert hierarchical(indexed, indexed.cluster_queues[queue]) is expected, why
    assert hierarchical(plain, plain.cluster_queues[queue]) is expected, why
