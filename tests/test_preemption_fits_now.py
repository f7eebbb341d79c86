"""Preemption's shortcut for a preemptor that fits as it is (``victims.fits_now``, used by
``deciding.decide`` before any search): it must answer exactly when the search itself would
answer ``FITS``, and ``decide`` must decide as it did when every preemptor was searched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from services.preemption import deciding
from services.preemption.borrowing import BorrowingTree
from services.preemption.cluster import Cluster
from services.preemption.deciding import Decision, decide
from services.preemption.victims import FITS, Running, find_victims, fits_now
from shared.config import ClusterQueue, Cohort
from shared.events import AnyEvent, PriorityBoosted
from tests.test_preemption_holds import admit, ask, evict, ref
from tests.victims_search import F, by_queue, cohort, cq, run, wants

# --- fits_now against find_victims -------------------------------------------------------------


@dataclass
class FitCase:
    why: str  # the rule this case pins down
    queues: list[ClusterQueue]
    running: list[Running]
    queue: str  # the preemptor's ClusterQueue
    needs: dict[str, int]  # whole units per "flavor/resource"
    fits: bool  # what fits_now must answer (and find_victims: FITS or not)
    cohorts: list[Cohort] = field(default_factory=list)
    tree_without: str = ""  # a ClusterQueue left out of the tree (config ahead of it)
    config_without: str = ""  # a ClusterQueue in the tree but not in the config


FIT_CASES = [
    FitCase("a need equal to what is free fits", [cq("a", {F: 4})],
            [run("r", "a", 0, {F: 2})], "a", {F: 2}, fits=True),
    FitCase("one unit more than is free is contested: the search must run", [cq("a", {F: 4})],
            [run("r", "a", 0, {F: 2})], "a", {F: 3}, fits=False),
    FitCase("room borrowed from the cohort counts, as the search counts it",
            [cq("a", {F: 2}, "c"), cq("b", {F: 4}, "c")], [run("r", "a", 0, {F: 2})], "a",
            {F: 4}, fits=True),
    FitCase("a borrowing limit bounds what the cohort lends: contested",
            [cq("a", {F: (2, 1, None)}, "c"), cq("b", {F: 4}, "c")],
            [run("r", "a", 0, {F: 2})], "a", {F: 2}, fits=False),
    FitCase("a lender's lendingLimit keeps the rest for itself: contested",
            [cq("a", {F: 2}, "c"), cq("b", {F: (4, None, 1)}, "c")],
            [run("r", "a", 0, {F: 2})], "a", {F: 2}, fits=False),
    FitCase("the second need contested is enough: every need is looked at",
            [cq("a", {F: 4, "g/gpu": 1})], [run("r", "a", 0, {"g/gpu": 1})], "a",
            {F: 1, "g/gpu": 1}, fits=False),
    FitCase("no contested resource at all fits (nothing to free)", [cq("a", {F: 4})],
            [run("r", "a", 0, {F: 4})], "a", {}, fits=True),
    FitCase("a zero need in an over-committed queue is contested (0 > negative room)",
            [cq("a", {F: 2})], [run("r", "a", 0, {F: 3})], "a", {F: 0}, fits=False),
    FitCase("a ClusterQueue nobody configured: the search says it is not found",
            [cq("a", {F: 4})], [], "zzz", {F: 1}, fits=False),
    FitCase("in the config but not in the tree: not found, never FITS",
            [cq("a", {F: 4}), cq("b", {F: 4})], [], "b", {F: 1}, fits=False, tree_without="b"),
    FitCase("in the tree but not in the config: not found, never FITS",
            [cq("a", {F: 4}), cq("b", {F: 4})], [], "b", {F: 1}, fits=False, config_without="b"),
    FitCase("room under a parent cohort's own quota counts",
            [cq("a", {F: 1}, "child")], [], "a", {F: 3}, fits=True,
            cohorts=[cohort("child", "root"), cohort("root", quotas={F: 2})]),
]  # fmt: skip


@pytest.mark.parametrize("case", FIT_CASES, ids=[c.why for c in FIT_CASES])
def test_fits_now_answers_as_the_search(case: FitCase) -> None:
    tree = BorrowingTree.build([q for q in case.queues if q.metadata.name != case.tree_without],
                               case.cohorts)  # fmt: skip
    for w in case.running:
        tree.add_usage(w.cluster_queue, w.usage)
    queues = {q.metadata.name: q for q in case.queues if q.metadata.name != case.config_without}
    preemptor = wants(case.queue, 100, case.needs)
    answer = fits_now(tree, queues, case.queue, preemptor.needs)
    searched = find_victims(
        tree=tree, cluster_queues=queues, preemptor=preemptor, running=by_queue(case.running)
    )
    assert answer == case.fits
    assert answer == (searched.message == FITS)


# --- decide with the shortcut against decide searching every time -------------------------------


def _reserved(name: str, since: float) -> AnyEvent:
    return PriorityBoosted(
        source="recovery",
        workload=ref(name),
        boost=0,
        reserved=True,
        since=datetime.fromtimestamp(since, UTC),
    )


@dataclass
class DecideCase:
    why: str
    events: Sequence[AnyEvent]
    uid: str  # the preemptor decided for
    shortcut: bool  # whether the answer comes from fits_now (no search)
    victims: int = 0  # how many it finds
    says: str = ""  # how its message starts
    queues: Mapping[str, int] = field(default_factory=lambda: {"a": 4})  # CPUs, no cohort


DECIDE_CASES = [
    DecideCase("fits since admission asked: nothing said, by the shortcut",
               [admit("r", "a", 2), ask("p", "a", 2)], "p", shortcut=True),
    DecideCase("contested: the search runs and finds its victim",
               [admit("r", "a", 4), ask("p", "a", 2)], "p", shortcut=False, victims=1),
    DecideCase("contested without candidates: the search runs and says why",
               [admit("r", "a", 4, priority=200), ask("p", "a", 2)], "p", shortcut=False,
               says="Workload requires preemption, but there are no candidate"),
    DecideCase("fits, but another reservation waits first in its queue: told so, no shortcut",
               [admit("r", "a", 2), ask("x", "a", 4), _reserved("x", 10), ask("p", "a", 2)], "p",
               shortcut=False, says="waits behind an ageing reservation"),
    DecideCase("a reservation that fits is the first one: the shortcut answers for it too",
               [admit("r", "a", 2), ask("p", "a", 2), _reserved("p", 10)], "p", shortcut=True),
    DecideCase("busy (its victims still leave): nothing, before any shortcut",
               [admit("r", "a", 2), admit("v", "a", 2), ask("p", "a", 2), evict("v", "a", "p")], "p",
               shortcut=False),
    DecideCase("its ClusterQueue is gone from the config: the search says not found",
               [ask("p", "gone", 1)], "p", shortcut=False, says="ClusterQueue gone not found"),
]  # fmt: skip


LATER = 4e9  # decided long after every run was admitted (no run protected)


def _cluster(case: DecideCase) -> Cluster:
    cluster = Cluster()
    cluster.set_config([cq(name, {"rf/cpu": cpus}, within="LowerPriority")
                        for name, cpus in case.queues.items()])  # fmt: skip
    for event in case.events:
        cluster.apply(event)
    return cluster


@pytest.mark.parametrize("case", DECIDE_CASES, ids=[c.why for c in DECIDE_CASES])
def test_decide_with_the_shortcut_decides_as_a_search(
    case: DecideCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[bool] = []

    def spy(*args: object) -> bool:
        answer = fits_now(*args)  # type: ignore[arg-type]
        taken.append(answer)
        return answer

    monkeypatch.setattr(deciding, "fits_now", spy)
    with_shortcut = decide(_cluster(case), case.uid, LATER)
    monkeypatch.setattr(deciding, "fits_now", lambda *_: False)  # every preemptor searched
    searched = decide(_cluster(case), case.uid, LATER)
    assert with_shortcut == searched
    assert (taken == [True]) == case.shortcut
    assert len(searched.victims) == case.victims
    assert searched.message.startswith(case.says)
    if case.shortcut:
        assert with_shortcut == Decision()
