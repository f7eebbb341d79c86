"""Which waiting preemptors the preemption service looks at after folding a batch of events
(PreemptionService._fold): its pure bookkeeping, without the bus."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import cast

import msgspec
import pytest

from services.preemption.service import SETTLE_SECONDS, PreemptionService
from shared.events import AnyEvent, PriorityBoosted, WorkloadPending
from shared.service import Runtime
from tests.test_preemption_holds import admit, ask, deleted, evict, evicted, finished, ref
from tests.victims_search import cq


def admitted(name: str, queue: str = "a") -> AnyEvent:
    return admit(name, queue, 1)


def pending(name: str, queue: str = "a", may_help: bool = True) -> AnyEvent:
    asked = ask(name, queue, 1)
    assert isinstance(asked, WorkloadPending)
    return asked if may_help else msgspec.structs.replace(asked, preemption_may_help=False)


def reserved(name: str) -> PriorityBoosted:
    since = datetime(2026, 1, 1, tzinfo=UTC)
    return PriorityBoosted(
        source="recovery", workload=ref(name), boost=10, reserved=True, since=since
    )


@dataclass
class Case:
    why: str
    before: list[AnyEvent]  # folded first, nothing due afterwards
    batch: list[AnyEvent]  # the batch whose fold is checked
    due_now: set[str]  # due at once
    due_later: set[str] = field(default_factory=set)  # due after SETTLE_SECONDS


CASES = {
    "asks": Case(
        "A request that preemption may help is looked at at once.",
        [],
        [pending("p")],
        {"p"},
    ),
    "may_not_help": Case(
        "A request preemption cannot help is not looked at.",
        [],
        [pending("p", may_help=False)],
        set(),
    ),
    "own_answer": Case(
        "Its own answer (no victims) coming back changes nothing to look at: with batches"
        " off it shares admission's subjects.",
        [pending("p")],
        [msgspec.structs.replace(pending("p"), source="preemption")],
        set(),
    ),
    "asks_again": Case(
        "Admission's report again while it waits: looked at again.",
        [pending("p")],
        [pending("p")],
        {"p"},
    ),
    "flight_ends": Case(
        "When the last victim of a preemptor's flight leaves, the preemptor is looked at"
        " again after admission has had time to admit it.",
        [admitted("v"), pending("p"), evict("v", "a", "p")],
        [evicted("v")],
        set(),
        {"p"},
    ),
    "reservation_queue_changes": Case(
        "A waiting reservation is looked at when its ClusterQueue changes (another"
        " workload's admission there).",
        [pending("r"), reserved("r")],
        [admitted("other")],
        {"r"},
    ),
    "reservation_after_change_in_batch": Case(
        "A reservation made later in the batch than the change to its queue is looked at"
        " too: the queue counts as changed for the whole batch.",
        [pending("r")],
        [admitted("other"), reserved("r")],
        {"r"},
    ),
    "reservation_other_queue": Case(
        "A change in another ClusterQueue does not make a reservation due.",
        [pending("r"), reserved("r")],
        [admitted("other", queue="b")],
        set(),
    ),
    "no_reservation": Case(
        "Without a reservation, a queue's change alone makes no one due.",
        [pending("p")],
        [admitted("other")],
        set(),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_due_after_fold(name: str) -> None:
    case = CASES[name]
    service = PreemptionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.cluster.set_config([cq("a", {"rf/cpu": 4}), cq("b", {"rf/cpu": 4})])
    service._fold(case.before, live=False)
    service.due.clear()
    started = time.monotonic()
    service._fold(case.batch, live=True)
    ended = time.monotonic()
    now = {uid for uid, when in service.due.items() if started <= when <= ended}
    later = {uid for uid, when in service.due.items() if when >= started + SETTLE_SECONDS}
    assert now == case.due_now, case.why
    assert later == case.due_later, case.why
    assert set(service.due) == now | later, case.why


# (the fact, whether the preemptor's last "cannot help" answer is forgotten, why)
TOLD: list[tuple[AnyEvent, bool, str]] = [
    (admitted("p"), True, "admitted: a later wait is another, its answer is told again"),
    (finished("p"), True, "finished: over"),
    (deleted("p"), True, "deleted: gone"),
    (evicted("p"), False, "evicted: it may still wait for the same room"),
    (pending("p"), False, "asked again: the same answer is not sent twice"),
    (admitted("other"), False, "another workload's admission"),
]


@pytest.mark.parametrize(("event", "forgotten", "why"), TOLD, ids=[t[2] for t in TOLD])
def test_a_cannot_help_answer_is_forgotten_once_it_says_nothing(
    event: AnyEvent, forgotten: bool, why: str
) -> None:
    service = PreemptionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.cluster.set_config([cq("a", {"rf/cpu": 4})])
    service.told = {"p": "no victims", "q": "no victims"}
    service._fold([event], live=True)
    assert ("p" not in service.told) == forgotten, why
    assert "q" in service.told, "another preemptor's answer stays"
