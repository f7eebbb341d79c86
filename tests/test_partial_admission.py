"""Partial admission (services/admission/partial.py) replays Kueue's scheduler_test.go cases:
a pod set with a min_count runs with the largest count that fits, found by Kueue's search."""

from __future__ import annotations

import pytest

from services.admission.partial import reduced, search
from services.admission.scheduler import Admission, Inadmissible, Scheduler
from shared.config import ConfigObject
from shared.events import PodSet
from tests.scheduler_world import config, cq, flavor, group, lq, ref, scheduler, wl

GPU = "example.com/gpu"


def sales() -> list[ConfigObject]:
    """Kueue's "sales" ClusterQueue: 50 CPUs in flavor default, no cohort, StrictFIFO."""
    return config(
        flavor("default"),
        cq(
            "sales",
            group(["cpu"], ("default", {"cpu": (50, 0, None)})),
            queueingStrategy="StrictFIFO",
        ),
        lq("main", "sales"),
    )


def eng_beta() -> list[ConfigObject]:
    """Kueue's "eng-beta": 20 GPUs of model-a, preempting lower priorities in the queue."""
    return config(
        flavor("model-a"),
        cq(
            "eng-beta",
            group([GPU], ("model-a", {GPU: (20, 0, None)})),
            cohort="eng",
            queueingStrategy="StrictFIFO",
            preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        ),
        lq("main", "eng-beta"),
    )


def pod_set(name: str, count: int, min_count: int | None = None, **requests: int) -> PodSet:
    milli = {resource.replace("_", "."): amount * 1000 for resource, amount in requests.items()}
    return PodSet(name=name, count=count, requests=milli, min_count=min_count)


def gpus(count: int, min_count: int | None = None) -> PodSet:
    return PodSet(name="one", count=count, requests={GPU: 1000}, min_count=min_count)


def counts(decisions: list[Admission | Inadmissible], name: str) -> dict[str, int]:
    """The counts ``name`` was admitted with, per pod set."""
    for decision in decisions:
        if isinstance(decision, Admission) and decision.ref.name == name:
            return {a.pod_set: a.count for a in decision.assignments}
    raise AssertionError(f"{name} was not admitted: {decisions}")


def waiting(decisions: list[Admission | Inadmissible], name: str) -> Inadmissible:
    found = [d for d in decisions if isinstance(d, Inadmissible) and d.ref.name == name]
    assert found, f"{name} is not pending: {decisions}"
    return found[-1]


ADMITTED: list[tuple[str, list[PodSet], dict[str, int]]] = [
    (
        "kueue: partial admission single variable pod set (50 x 2 CPU, min 20: 25 fill 50)",
        [pod_set("one", 50, 20, cpu=2)],
        {"one": 25},
    ),
    (
        "kueue: partial admission multiple variable pod sets (each shrinks by its share)",
        [pod_set("one", 20, cpu=1), pod_set("two", 30, 10, cpu=1), pod_set("three", 15, 5, cpu=1)],
        {"one": 20, "two": 20, "three": 10},
    ),
    ("berth: the full counts when they fit", [pod_set("one", 20, 10, cpu=2)], {"one": 20}),
]


@pytest.mark.parametrize(("case", "pod_sets", "expected"), ADMITTED, ids=[a[0] for a in ADMITTED])
def test_largest_counts_that_fit(
    case: str, pod_sets: list[PodSet], expected: dict[str, int]
) -> None:
    """The workload is admitted at once with Kueue's counts (see the id)."""
    s = scheduler(sales(), wl("new", queue="main", pod_sets=pod_sets))
    decisions = s.schedule()
    assert counts(decisions, "new") == expected, case
    admission = next(d for d in decisions if isinstance(d, Admission))
    usage = sum(a.usage.get("cpu", 0) for a in admission.assignments)
    assert usage == 1000 * sum(expected[p.name] * p.requests["cpu"] // 1000 for p in pod_sets)


def test_without_min_count_nothing_shrinks() -> None:
    """kueue: partial admission disabled, multiple variable pod sets: with no slack in any
    pod set (Kueue's gate off), 65 CPUs never fit in 50 and the workload waits, saying so."""
    s = scheduler(
        sales(),
        wl("new", queue="main", pod_sets=[pod_set("one", 20, cpu=1), pod_set("two", 45, cpu=1)]),
    )
    decision = waiting(s.schedule(), "new")
    assert "insufficient quota for cpu in flavor default" in decision.message
    assert not decision.preemption_may_help


def test_min_count_above_the_quota_waits_with_the_reason() -> None:
    """berth: even the minimum (8 x 8 CPU) exceeds the 50 CPUs: pending, naming the quota."""
    s = scheduler(sales(), wl("new", queue="main", pod_sets=[pod_set("one", 10, 8, cpu=8)]))
    decision = waiting(s.schedule(), "new")
    assert "request > maximum capacity (80 > 50)" in decision.message, decision.message
    assert decision.message.endswith(
        "at its minimum (one: 8): couldn't assign flavors to pod set one: insufficient quota"
        " for cpu in flavor default, request > maximum capacity (64 > 50)"
    ), decision.message


def _with_old(new: PodSet) -> Scheduler:
    """Kueue's eng-beta cases: "old" (priority -4) holds 10 of the 20 GPUs, "new" (4) comes."""
    s = scheduler(eng_beta(), wl("old", queue="main", priority=-4, pod_sets=[gpus(10)]))
    assert counts(s.schedule(), "old") == {"one": 10}
    s.submit(wl("new", queue="main", priority=4, pod_sets=[new]))
    return s


def test_preempt_first() -> None:
    """kueue: partial admission single variable pod set, preempt first: all 20 fit once "old"
    is preempted, so preemption is asked for the full count, not 10 admitted now."""
    s = _with_old(gpus(20, 10))
    decision = waiting(s.schedule(), "new")
    assert decision.preemption_may_help
    assert [(c[0], c[2]) for c in decision.contested] == [("model-a", 20000)]
    assert "10 more needed" in decision.message


def test_preempt_with_partial_admission() -> None:
    """kueue: partial admission single variable pod set, preempt with partial admission: 30
    never fit in 20, so preemption is asked for 20 (the largest count it can make room for),
    and once "old" is gone 20 are admitted."""
    s = _with_old(gpus(30, 10))
    decision = waiting(s.schedule(), "new")
    assert decision.preemption_may_help
    assert [(c[0], c[2]) for c in decision.contested] == [("model-a", 20000)]
    assert "10 more needed" in decision.message
    s.finish(ref("old"))
    assert counts(s.schedule(), "new") == {"one": 20}


def test_no_victims_takes_what_fits_now() -> None:
    """berth: when preemption says it cannot help (Kueue: no targets), the workload takes the
    largest count that fits without it: 10 beside "old"."""
    s = _with_old(gpus(30, 10))
    waiting(s.schedule(), "new")
    s.no_victims(ref("new"))
    assert counts(s.schedule(), "new") == {"one": 10}


SEARCH: list[tuple[str, int, int | None]] = [
    ("a count between the full and the minimum", 7, 7),
    ("below the minimum (3): none", 1, None),
    ("index 0 is the full count", 9, 9),
    ("the minimum itself", 3, 3),
]


@pytest.mark.parametrize(("reason", "limit", "expected"), SEARCH, ids=[s[0] for s in SEARCH])
def test_search_finds_the_largest_count(reason: str, limit: int, expected: int | None) -> None:
    """Binary search over Kueue's index gives the largest count at most ``limit``."""
    pod_sets = [pod_set("one", 9, 3, cpu=1)]

    def accept(candidate: list[PodSet]) -> object:
        return candidate[0].count if candidate[0].count <= limit else None

    found: object = search(pod_sets, accept)  # type: ignore[arg-type]
    assert found == expected, reason


def test_reduced_matches_kueues_integer_arithmetic() -> None:
    """Each pod set drops delta * i / total (truncated), so shares stay proportional."""
    pod_sets = [
        pod_set("one", 20, cpu=1),
        pod_set("two", 30, 10, cpu=1),
        pod_set("three", 15, 5, cpu=1),
    ]
    assert [p.count for p in reduced(pod_sets, 15, 30)] == [20, 20, 10]
    assert [p.count for p in reduced(pod_sets, 1, 30)] == [20, 30, 15]
    assert [p.count for p in reduced(pod_sets, 30, 30)] == [20, 10, 5]
