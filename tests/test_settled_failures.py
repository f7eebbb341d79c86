"""services/admission/settled.py: a failed assignment is reused only while what it read of the
usage is the same, and then it is the result assigning again would give.

Each case builds a quota tree, charges random usage to its ClusterQueues many times, and
assigns the same pod sets in one ClusterQueue each time: every two states that read the same
(``usage_read``) must give the same result, and some states must read the same (else the
case proves nothing)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from services.admission import partial
from services.admission import settled as settled_module
from services.admission.flavors import AssignResult, pod_sets_shape
from services.admission.settled import Reading, SettledFailures
from services.admission.topology import Topology
from shared.config import parse_object
from shared.events import PodSet
from tests.scheduler_world import V1, cq, flavor, group

GI = 2**30 * 1000  # one Gi in milli-units


def cohort(name: str, parent: str = "", cpu: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentName": parent} if parent else {}
    if cpu is not None:
        spec["resourceGroups"] = [group(["cpu", "memory"], ("a", {"cpu": cpu, "memory": "8Gi"}))]
    return {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def two_flavors(cpu: Any) -> dict[str, Any]:
    return group(["cpu", "memory"], ("a", {"cpu": cpu, "memory": "16Gi"}), ("b", {"cpu": 4}))


def pods(*counts: tuple[int, int]) -> list[PodSet]:
    """Pod sets of ``count`` pods of ``cpu`` cpus and 1Gi each."""
    return [
        PodSet(f"ps{i}", count, {"cpu": cpu * 1000, "memory": GI})
        for i, (count, cpu) in enumerate(counts)
    ]


CASES: list[tuple[str, list[dict[str, Any]], list[PodSet]]] = [
    (
        "no limits: only the cohort's free quota matters, capped at the request",
        [cq(f"q{i}", two_flavors(4), cohort="c") for i in range(3)],
        pods((2, 1)),
    ),
    (
        "a borrowing limit caps what the root's free quota can add",
        [cq("q0", two_flavors((4, 2, None)), cohort="c")]
        + [cq(f"q{i}", two_flavors(4), cohort="c") for i in (1, 2)],
        pods((3, 2)),
    ),
    (
        "a lending limit keeps part of the quota local (local_available counts)",
        [cq("q0", two_flavors((4, None, 1)), cohort="c")]
        + [cq(f"q{i}", two_flavors(4), cohort="c") for i in (1, 2)],
        pods((5, 1)),
    ),
    (
        "nested cohorts: the middle cohort's usage is read exactly (reclaim in hierarchy)",
        [
            cohort("root", cpu=2),
            cohort("mid", parent="root"),
            cq("q0", two_flavors(3), cohort="mid", preemption={"reclaimWithinCohort": "Any"}),
            cq("q1", two_flavors(3), cohort="mid"),
            cq("q2", two_flavors(3), cohort="root"),
        ],
        pods((2, 2)),
    ),
    (
        "two pod sets: the cap is the sum over both",
        [cq(f"q{i}", two_flavors(4), cohort="c") for i in range(3)],
        pods((2, 1), (1, 3)),
    ),
    (
        "partial admission: fewer pods are tried under the same caps",
        [cq(f"q{i}", two_flavors(4), cohort="c") for i in range(3)],
        [PodSet("workers", 6, {"cpu": 1000, "memory": GI}, min_count=2)],
    ),
]


def _outcome(result: AssignResult) -> tuple[Any, ...]:
    return (
        result.fits,
        result.message,
        result.borrows,
        result.preemption_may_help,
        result.preempt_flavors,
        result.contested,
        result.waits_for_room,
        result.assignments,
    )


@pytest.mark.parametrize(("reason", "documents", "pod_sets"), CASES, ids=[c[0] for c in CASES])
def test_same_usage_read_same_result(
    reason: str, documents: list[dict[str, Any]], pod_sets: list[PodSet]
) -> None:
    objects = [flavor("a"), flavor("b"), *documents]
    topology = Topology.build(parse_object(document) for document in objects)
    tree, info = topology.tree, topology.cqs["q0"]
    settled = SettledFailures(tree)
    shape = pod_sets_shape(pod_sets)
    rng = random.Random(11)
    seen: dict[Reading, tuple[Any, ...]] = {}
    states = 0
    for _ in range(400):
        charged = []
        for name in topology.cqs:
            usage = {
                (f, "cpu"): rng.randrange(0, 6) * 1000 for f in ("a", "b") if rng.random() < 0.7
            }
            usage[("a", "memory")] = rng.randrange(0, 4) * GI
            tree.add_usage(name, usage)
            charged.append((name, usage))
        read = settled.usage_read(info, shape, pod_sets)
        outcome = _outcome(
            partial.assign(info, topology.flavors, tree, pod_sets, victims_possible=True)
        )
        assert seen.setdefault(read, outcome) == outcome, reason
        states += 1
        for name, usage in charged:
            tree.remove_usage(name, usage)
    assert len(seen) < states, f"{reason}: no two states read the same; the case proves nothing"


# (why, pod sets in q0 (1 cpu of flavor a, 4 of b; q1 lends), whether they fit, borrowing)
KEPT: list[tuple[str, list[PodSet], bool, bool]] = [
    ("a failure is kept for its reading", pods((9, 2)), False, False),
    (
        "a success that borrows is kept for its reading too (a deferred borrower tried again,"
        " or one of its shape in a later pass, reads the same)",
        pods((1, 2)),
        True,
        True,
    ),
    ("a success without borrowing is admitted at once: not kept", pods((1, 1)), True, False),
]


@pytest.mark.parametrize(("why", "pod_sets", "fits", "borrows"), KEPT, ids=[c[0] for c in KEPT])
def test_a_result_is_kept_for_the_usage_it_read(
    why: str, pod_sets: list[PodSet], fits: bool, borrows: bool
) -> None:
    """A failure and a borrowing success come back only for the same key and the same usage
    read; one of each is kept per key, neither hides the other."""
    objects = [
        flavor("a"),
        flavor("b"),
        cq("q0", two_flavors(1), cohort="c"),
        cq("q1", two_flavors(4), cohort="c"),
    ]
    topology = Topology.build(parse_object(document) for document in objects)
    settled = SettledFailures(topology.tree)
    info = topology.cqs["q0"]
    shape = pod_sets_shape(pod_sets)
    read = settled.usage_read(info, shape, pod_sets)
    reader = settled.reader(info, shape, pod_sets)
    result = partial.assign(info, topology.flavors, topology.tree, pod_sets)
    assert (result.fits, result.borrows) == (fits, borrows), why
    settled.remember(reader, True, read, result)
    kept = not fits or borrows
    assert (settled.known(reader, True, read) is result) is kept, why
    assert settled.known(reader, False, read) is None, "victims possible: its own key"
    another = (read[0], (*read[1][:-1], read[1][-1] + 1))
    assert settled.known(reader, True, another) is None, "another read"
    other = partial.assign(
        info, topology.flavors, topology.tree, pods((1, 2) if not fits else (9, 2))
    )
    settled.remember(reader, True, another, other)
    assert (settled.known(reader, True, read) is result) is kept, f"{why}: kinds kept apart"


# (why, version of the second reading, whether it sees the usage charged in between)
ROOT_READS: list[tuple[str, int | None, bool]] = [
    ("the root's usage changed and so did its version: read again", 2, True),
    ("no version (a caller that keeps none): always read", None, True),
    (
        "same version: the root's part is reused, unread (the caller bumps the version with"
        " every usage change, so nothing changed)",
        1,
        False,
    ),
]


@pytest.mark.parametrize(("why", "version", "sees"), ROOT_READS, ids=[c[0] for c in ROOT_READS])
def test_the_roots_part_is_read_once_per_version(why: str, version: int | None, sees: bool) -> None:
    """The cohort's part of a reading is shared by the ClusterQueues of the cohort and read
    once per version of the root's usage; their own part is always read."""
    objects = [flavor("a"), flavor("b"), *(cq(f"q{i}", two_flavors(4), cohort="c") for i in (0, 1))]
    topology = Topology.build(parse_object(document) for document in objects)
    settled = SettledFailures(topology.tree)
    pod_sets = pods((2, 1))
    shape = pod_sets_shape(pod_sets)
    q0, q1 = topology.cqs["q0"], topology.cqs["q1"]
    first = settled.usage_read(q0, shape, pod_sets, 1)
    assert settled.usage_read(q1, shape, pod_sets, 1)[1] is first[1], "one root, one part"
    topology.tree.add_usage("q1", {("a", "cpu"): 7000})  # q1 borrows: the cohort's free shrinks
    again = settled.usage_read(q0, shape, pod_sets, version)
    assert again[0] == first[0], "q0's own usage did not change"
    assert (again[1] != first[1]) is sees, why
    assert settled.usage_read(q0, shape, pod_sets) == settled.usage_read(q0, shape, pod_sets, 3)


# (why, the ClusterQueue's cohort: "c" its root, "mid" a cohort between them, own version of
#  the second reading, whether the second reading sees q0's usage charged in between)
OWN_READS: list[tuple[str, str, int | None, bool]] = [
    ("q0's own usage changed and so did its version: read again", "c", 2, True),
    ("no own version (a caller that keeps none): always read", "c", None, True),
    (
        "same own version: q0's part is reused, unread (the caller bumps it with every change"
        " of q0's usage, so nothing changed)",
        "c",
        1,
        False,
    ),
    (
        "a cohort between q0 and the root: its usage changes with its other ClusterQueues, so"
        " the exact part is read every time, whatever the own version",
        "mid",
        1,
        True,
    ),
]


@pytest.mark.parametrize(
    ("why", "parent", "version", "sees"), OWN_READS, ids=[c[0] for c in OWN_READS]
)
def test_the_own_part_is_read_once_per_own_version(
    why: str, parent: str, version: int | None, sees: bool
) -> None:
    """A ClusterQueue's own part of a reading is read once per version of its own usage,
    only where every exact pair is of its own node."""
    objects = [
        flavor("a"),
        flavor("b"),
        cohort("c", cpu=2),
        cohort("mid", parent="c"),
        cq("q0", two_flavors(4), cohort=parent),
        cq("q1", two_flavors(4), cohort="mid"),
    ]
    topology = Topology.build(parse_object(document) for document in objects)
    settled = SettledFailures(topology.tree)
    pod_sets = pods((2, 1))
    shape = pod_sets_shape(pod_sets)
    q0 = topology.cqs["q0"]
    first = settled.usage_read(q0, shape, pod_sets, 1, 1)
    # q0 uses 6 cpus of its 4 (a borrowing limit does not stop charging): it and, where it
    # sits under "mid", the middle cohort read it; the root's version stays (its part aside).
    charged = "q0" if parent == "c" else "q1"
    topology.tree.add_usage(charged, {("a", "cpu"): 6000})
    again = settled.usage_read(q0, shape, pod_sets, 1, version)
    assert (again != first) is sees, why
    assert settled.usage_read(q0, shape, pod_sets) == settled.usage_read(q0, shape, pod_sets, 2, 3)


# (why, q0's quota of cpu on flavor a, its cohort, its usage of it in two states, whether the
#  two states read the same; q0 is asked 2 cpus and 1Gi unless ``cpu`` says otherwise)
# q0's subtree quota of cpu is 4000 and the shape asks 2000 (1 pod of 2 cpus): bounds 2000
# and 4001 (settled._bounds) where it has a cohort and no limit.
BOUNDS: list[tuple[str, Any, str, int, int, bool, int | None]] = [
    (
        "both states borrow (usage above the subtree): the same reading",
        4,
        "c",
        5000,
        7000,
        True,
        None,
    ),
    ("at the high bound and above it: borrowing either way", 4, "c", 4001, 9000, True, None),
    (
        "one at the subtree, one above it: a count of 0 tells them apart",
        4,
        "c",
        4000,
        9000,
        False,
        None,
    ),
    ("just below the high bound and at it: read apart", 4, "c", 4000, 4001, False, None),
    ("just below the subtree and at it: read apart", 4, "c", 3999, 4000, False, None),
    ("both leave room for the request (at most subtree - asked)", 4, "c", 0, 2000, True, None),
    ("at the low bound and just above it: read apart", 4, "c", 2000, 2001, False, None),
    ("one leaves room, the other borrows with 2 more: read apart", 4, "c", 2000, 3000, False, None),
    (
        "a count that may drop to 0: at the subtree and above it read apart",
        4,
        "c",
        4000,
        5000,
        False,
        0,
    ),
    (
        "a count that may drop to 0: both above the subtree read the same",
        4,
        "c",
        5000,
        7000,
        True,
        0,
    ),
    (
        "a borrowing limit caps what it may use: read exactly",
        (4, 2, None),
        "c",
        5000,
        7000,
        False,
        None,
    ),
    (
        "a lending limit keeps a local share: read exactly",
        (4, None, 1),
        "c",
        5000,
        7000,
        False,
        None,
    ),
    ("a ClusterQueue that is its own root: read exactly", 4, "", 5000, 7000, False, None),
]


@pytest.mark.parametrize(
    ("why", "quota", "parent", "first", "second", "same", "min_count"),
    BOUNDS,
    ids=[c[0] for c in BOUNDS],
)
def test_own_usage_is_read_within_bounds(
    why: str, quota: Any, parent: str, first: int, second: int, same: bool, min_count: int | None
) -> None:
    """A ClusterQueue's own usage of a pair tells the assigner only whether a request of at
    most what the shape asks (from 0 of it, for a count partial admission may reduce to 0)
    would borrow: read within its subtree less that and its subtree plus 1, where it has
    neither limit and a cohort (settled.py ``_bounds``); exactly otherwise."""
    objects = [flavor("a"), flavor("b"), cq("q0", two_flavors(quota), cohort=parent)]
    objects.append(cq("q1", two_flavors(40), cohort="c"))
    topology = Topology.build(parse_object(document) for document in objects)
    tree, info = topology.tree, topology.cqs["q0"]
    pod_sets = [PodSet("ps0", 1, {"cpu": 2000, "memory": GI}, min_count=min_count)]
    shape = pod_sets_shape(pod_sets)
    readings, outcomes = [], []
    for used in (first, second):
        settled = SettledFailures(tree)
        tree.add_usage("q0", {("a", "cpu"): used})
        readings.append(settled.usage_read(info, shape, pod_sets))
        outcomes.append(_outcome(partial.assign(info, topology.flavors, tree, pod_sets)))
        tree.remove_usage("q0", {("a", "cpu"): used})
    assert (readings[0] == readings[1]) is same, why
    if same:
        assert outcomes[0] == outcomes[1], why


def test_a_count_reduced_to_0_reads_usage_at_the_subtree_apart() -> None:
    """A pod set that may be reduced to 0 pods (min_count 0) still tests the resources it
    requests, as ``usage + 0 > subtree``: its ClusterQueue's usage at its subtree (fits
    without borrowing at 0 pods) and above it (borrows) must read apart, though both leave
    the cohort the same free quota; read the same, a result kept in one was handed back in
    the other (the reviewer's case: q0 at 4000 with q1 at 3000, and q0 at 5000 with q1 at
    2000)."""
    objects = [
        flavor("a"),
        cq("q0", group(["cpu"], ("a", {"cpu": 4})), cohort="c"),
        cq("q1", group(["cpu"], ("a", {"cpu": 4})), cohort="c"),
    ]
    topology = Topology.build(parse_object(document) for document in objects)
    tree, info = topology.tree, topology.cqs["q0"]
    pod_sets = [PodSet("main", 2, {"cpu": 2000}, min_count=0)]
    shape = pod_sets_shape(pod_sets)
    seen: list[tuple[Reading, bool]] = []
    for own, other in ((4000, 3000), (5000, 2000)):  # the cohort uses 7000 of 8000 in both
        tree.add_usage("q0", {("a", "cpu"): own})
        tree.add_usage("q1", {("a", "cpu"): other})
        result = partial.assign(info, topology.flavors, tree, pod_sets, victims_possible=True)
        seen.append((SettledFailures(tree).usage_read(info, shape, pod_sets), result.borrows))
        tree.remove_usage("q0", {("a", "cpu"): own})
        tree.remove_usage("q1", {("a", "cpu"): other})
    assert [borrows for _, borrows in seen] == [False, True]  # else the case proves nothing
    assert seen[0][0] != seen[1][0]


def test_the_limit_clears_the_bounds_too() -> None:
    """Past FAILURES_LIMIT readers (each with the results remembered on it), a new one
    starts over: every table built per shape is emptied, the distinct bounds too (else they
    pile up as shapes come and go); an existing one is kept as it is."""
    objects = [flavor("a"), flavor("b")]
    objects += [cq(f"q{i}", two_flavors(4), cohort="c") for i in range(2)]
    topology = Topology.build(parse_object(document) for document in objects)
    settled = SettledFailures(topology.tree)
    pod_sets = pods((1, 2))
    shape = pod_sets_shape(pod_sets)
    q0 = topology.cqs["q0"]
    usage = settled.usage_read(q0, shape, pod_sets)
    assert settled._bounds  # else the case proves nothing
    failed = partial.assign(q0, topology.flavors, topology.tree, pods((9, 2)))
    assert not failed.fits
    settled.remember(settled.reader(q0, shape, pod_sets), True, usage, failed)
    reader = settled._readers[("q0", shape)]
    for i in range(settled_module.FAILURES_LIMIT - 1):
        settled._readers[(f"x{i}", shape)] = reader
    assert settled.usage_read(q0, shape, pod_sets) == usage, "a known reader: nothing cleared"
    assert len(settled._readers) == settled_module.FAILURES_LIMIT
    other = pods((2, 2))
    settled.usage_read(topology.cqs["q1"], pod_sets_shape(other), other)
    assert list(settled._readers) == [("q1", pod_sets_shape(other))]
    assert settled.known(settled.reader(q0, shape, pod_sets), True, usage) is None, (
        "its failure went with its reader"
    )
