"""The scheduler with services/admission/settled.py's remembered results (failures and
successes, read once per version of the usage) decides exactly as one that assigns every
head again: each case and the lockstep property run against a scheduler whose remembered
results are never handed back."""

from __future__ import annotations

import copy
import gc
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.admission import assigning as assigning_module
from services.admission import partial
from services.admission import settled as settled_module
from services.admission.flavors import AssignResult
from services.admission.scheduler import Admission, Inadmissible, QueuedWorkload, Scheduler
from services.admission.settled import Reader, Reading, SettledFailures
from shared.config import ConfigObject
from tests.scheduler_world import wl
from tests.test_scheduler_offers import NO_BORROWING, OPS, Step, apply, lockstep, world
from tests.test_scheduler_properties import SETTINGS, tree_config


class _Forgetful(SettledFailures):
    """Remembers nothing: every head is assigned again."""

    def known(self, reader: Reader, victims_possible: bool, usage: Reading) -> AssignResult | None:
        return None

    @staticmethod
    def earlier(reader: Reader, victims_possible: bool, usage: Reading) -> AssignResult | None:
        return None


class Forgetful(Scheduler):
    """A scheduler without settled results (its within-pass failures stay)."""

    def __init__(self) -> None:
        super().__init__()
        self._settled = _Forgetful(self._config.tree)

    def set_config(self, objects: Iterable[ConfigObject]) -> None:
        super().set_config(objects)
        self._settled = _Forgetful(self._config.tree)


@dataclass
class Case:
    reason: str
    documents: list[ConfigObject]
    running: list[QueuedWorkload]  # admitted first
    steps: list[Step]  # then, before the last pass
    admitted: list[str]  # the last pass's admissions
    pending: list[str]  # the last pass's pending decisions
    spared: int  # flavor searches the remembered results spared in the last pass


# x borrows 2 of b's cpu (a is full) in a pass of its own, then finishes
X_ADMITTED_THEN_GONE: list[Step] = [
    ("submit", wl("x", "qa", t=1, cpu=2)),
    ("schedule", None),
    ("finish", "x"),
]
FULL_BY_THREE = [wl("a1", "qa", cpu=4), wl("b1", "qb", cpu=3), wl("b2", "qb", cpu=1)]


def x_failed_twice_then_b3(b3_cpu: int) -> list[Step]:
    """x (2 cpu, in a) fails with the cohort full, then with 1 cpu free once b2 finished; then
    b1 finishes and b3, ahead of x, asks ``b3_cpu`` of b."""
    return [
        ("submit", wl("x", "qa", t=1, cpu=2)),
        ("schedule", None),
        ("finish", "b2"),
        ("schedule", None),
        ("finish", "b1"),
        ("submit", wl("b3", "qb", t=0, cpu=b3_cpu)),
    ]


CASES = [
    Case(
        "a borrower that fits waits for the heads that need no borrowing; nothing changed the "
        "usage meanwhile: its success is handed back, not searched again",
        world(),
        [wl("a1", "qa", cpu=4)],
        [("submit", wl("x", "qa", t=1, cpu=2))],
        ["x"],
        [],
        1,
    ),
    Case(
        "a usage change after the read (z, needing no borrowing, admitted in b before x's "
        "second try): x is searched again and no longer fits",
        world(),
        [wl("a1", "qa", cpu=4)],
        [("submit", wl("x", "qa", t=1, cpu=2)), ("submit", wl("z", "qb", t=2, cpu=3))],
        ["z"],
        ["x"],
        0,
    ),
    Case(
        "the same reading in a later pass: y, of x's shape, fits as x did (x finished), and "
        "both its tries are handed back",
        world(),
        [wl("a1", "qa", cpu=4)],
        [*X_ADMITTED_THEN_GONE, ("submit", wl("y", "qa", t=2, cpu=2))],
        ["y"],
        [],
        2,
    ),
    Case(
        "quota changed by config (a may no longer borrow) with the reading of x's success: "
        "y is searched again and does not fit",
        world(),
        [wl("a1", "qa", cpu=4)],
        [
            *X_ADMITTED_THEN_GONE,
            ("config", world(NO_BORROWING)),
            ("submit", wl("y", "qa", t=2, cpu=2)),
        ],
        [],
        ["y"],
        0,
    ),
    Case(
        "x fails with the cohort full, then with 1 cpu free (b2 finished), then full again "
        "(b3 takes what b1 freed before x's turn): its failure with the cohort full, the one "
        "before its last, is handed back (settled.py: earlier)",
        world(),
        FULL_BY_THREE,
        x_failed_twice_then_b3(4),
        ["b3"],
        ["x"],
        1,
    ),
    Case(
        "as above, but b3 takes 3 cpu and leaves 1 free: x reads its last failure's usage "
        "(spared by it), not the earlier one's",
        world(),
        FULL_BY_THREE,
        x_failed_twice_then_b3(3),
        ["b3"],
        [],
        1,
    ),
    Case(
        "a borrowing limit of 1: x does not fit, and its failure stands for its next try",
        world((4, 1, None)),
        [wl("a1", "qa", cpu=4)],
        [("submit", wl("x", "qa", t=1, cpu=2))],
        [],
        ["x"],
        0,
    ),
]


def run(case: Case, scheduler: Scheduler, searches: list[int]) -> tuple[list[Any], list[Any]]:
    """The case's passes, on workloads of its own (the scheduler changes those it is
    handed); ``searches`` counts the flavor searches of the last one."""
    case = copy.deepcopy(case)
    scheduler.set_config(case.documents)
    for running in case.running:
        scheduler.submit(running)
    scheduler.schedule()
    for step in case.steps:
        apply(scheduler, step)
    searches.clear()
    last = scheduler.schedule()
    return last, [scheduler.workload_views(), scheduler.queue_stats()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason[:60])
def test_remembered_results(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    searches: list[int] = []
    assign = partial.assign

    def counted(*args: Any, **kwargs: Any) -> AssignResult:
        searches.append(1)
        return assign(*args, **kwargs)

    monkeypatch.setattr(partial, "assign", counted)
    last, views = run(case, Scheduler(), searches)
    remembering = len(searches)
    assert (last, views) == run(case, Forgetful(), searches), case.reason
    spared = len(searches) - remembering
    assert [d.ref.name for d in last if isinstance(d, Admission)] == case.admitted, case.reason
    assert [d.ref.name for d in last if isinstance(d, Inadmissible)] == case.pending, case.reason
    assert spared == case.spared, (case.reason, spared)


@SETTINGS
@given(configs=st.lists(tree_config(), min_size=1, max_size=2), ops=OPS)
def test_remembered_results_decide_as_searching_again(
    configs: list[list[ConfigObject]], ops: list[tuple[Any, ...]]
) -> None:
    """Under any sequence of events (borrowing and lending limits, hierarchies, StrictFIFO,
    configuration changes, nominations, reservations, churn), a scheduler handed back its
    remembered results decides as one that searches every time."""
    lockstep([Scheduler(), Forgetful()], configs, ops)


def _readers_holding(results: list[AssignResult]) -> list[Reader]:
    """The live settled readers that hold one of ``results`` as a failure, last or earlier."""
    gc.collect()
    held = [
        reader
        for reader in gc.get_objects()
        if isinstance(reader, Reader)
        for kept in (reader.failure, getattr(reader, "earlier", None))
        if kept is not None and any(kept[2] is result for result in results)
    ]
    return held


def test_earlier_failures_go_when_the_tables_start_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier failure is held by nothing but its reader: once the settled tables start
    over (past FAILURES_LIMIT readers) and the queue's readers too (past QUEUE_READERS),
    neither x's last failure nor the one before it is held any more (a table of its own
    kept them, and their readers, up to its own limit)."""
    s = Scheduler()
    s.set_config(world())
    for running in FULL_BY_THREE:
        s.submit(running)
    s.schedule()
    for step in x_failed_twice_then_b3(4)[:4]:  # x fails with the cohort full, then 1 free
        apply(s, step)
    readers = list(s._queues["a"].readers.values())
    results = [kept[2] for reader in readers if (kept := reader.failure) is not None]
    assert results and _readers_holding(results), "else the case proves nothing"
    del readers
    monkeypatch.setattr(settled_module, "FAILURES_LIMIT", 1)
    monkeypatch.setattr(assigning_module, "QUEUE_READERS", 1)
    s.submit(wl("y", "qa", t=2, cpu=3))  # a new shape: a new reader, the tables start over
    s.schedule()
    assert not _readers_holding(results)
