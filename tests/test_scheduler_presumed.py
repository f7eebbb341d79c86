"""Offered heads presumed left parked ahead of their turn (services/admission/presumed.py),
and ClusterQueues whose offers are left parked whole (settled.py: ``quiet``). Every case runs
against a scheduler that moves and tries every parked head (no offers, so no shortcut): the
decisions and the queues must be the same; the counts say that the shortcut applied, or did
not, where the case says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from services.admission import settled as settled_module
from services.admission.presumed import Presumed, presume, presume_all
from services.admission.queues import CLOCK, ClusterQueueQueue, OrderKey, Record, order_key
from services.admission.scheduler import Inadmissible, QueuedWorkload, Scheduler
from shared.config import ConfigObject
from tests.scheduler_world import config as parse
from tests.scheduler_world import cq, flavor, group, lq, wl
from tests.test_scheduler_offers import Step, apply

OD = "on-demand"


def world() -> list[ConfigObject]:
    """ClusterQueues a and b (BestEffortFIFO, 4 cpu and 4Gi each, borrowing allowed) in
    cohort co, and c alone in cohort other."""
    quota = {"cpu": 4, "memory": "4Gi"}
    return parse(
        flavor(OD),
        cq("a", group(["cpu", "memory"], (OD, quota)), cohort="co"),
        cq("b", group(["cpu", "memory"], (OD, quota)), cohort="co"),
        cq("c", group(["cpu", "memory"], (OD, quota)), cohort="other"),
        lq("qa", "a"),
        lq("qb", "b"),
        lq("qc", "c"),
    )


# The cohort's cpu: a1 fills a, b1 and b2 leave 1 cpu of b unused; its memory: bm1 and bm2
# fill b's (a's is unused); c1 fills c, alone in its cohort.
RUNNING = [
    wl("a1", "qa", cpu=4),
    wl("b1", "qb", cpu=2),
    wl("b2", "qb", cpu=1),
    wl("bm1", "qb", memory="2Gi"),
    wl("bm2", "qb", memory="2Gi"),
    wl("c1", "qc", cpu=4),
]
# Parked in a: p1 asks 4 cpu (3 more needed than the cohort has) and 1Gi (the cohort's free
# memory, read capped at that, stays above it), p2 asks 3 cpu (2 more).
PARKED = [wl("p1", "qa", t=5, cpu=4, memory="1Gi"), wl("p2", "qa", t=7, cpu=3)]


@dataclass
class Case:
    reason: str
    change: list[Step]  # between the second and the third pass
    presumed: int  # heads the third pass presumed left parked
    taken_back: int  # of those, taken back (an admission under their root came first)
    quiet: int  # ClusterQueues whose offers the third pass left parked whole
    pending: dict[str, str]  # the third pass's new pending messages, by workload (a part)


def finish(name: str) -> Step:
    return ("finish", name)


def submit(workload: QueuedWorkload) -> Step:
    return ("submit", workload)


SCHEDULE: Step = ("schedule", None)

CASES = [
    Case(
        "memory freed in the cohort: p1 and p2 read what they read; p1 is left parked in its "
        "turn, p2 presumed with it, and nothing is admitted: the presumption stands",
        [finish("bm1")],
        1,
        0,
        0,
        {},
    ),
    Case(
        "n (b, 1 cpu, between p1 and p2) is admitted after p2 was presumed: the cohort's cpu "
        "p2 reads is gone before its turn, so it is taken back and tried (a new message)",
        [finish("bm1"), submit(wl("n", "qb", t=6, cpu=1))],
        1,
        1,
        0,
        {"p2": "3 more needed"},
    ),
    Case(
        "as above, and r (a, queued, after p2) was a's next entry when p2 was presumed: that "
        "entry is dropped once p2 is taken back (r is pushed again after p2's turn, tried once, "
        "borrows memory and is admitted after the heads that need no borrowing)",
        [
            finish("bm1"),
            submit(wl("n", "qb", t=6, cpu=1)),
            submit(wl("r", "qa", t=10, memory="5Gi")),
        ],
        1,
        1,
        0,
        {"p2": "3 more needed"},
    ),
    Case(
        "n is admitted after p2's turn (n's key is above p2's): the presumption stands",
        [finish("bm1"), submit(wl("n", "qb", t=8, cpu=1))],
        1,
        0,
        0,
        {},
    ),
    Case(
        "n is admitted in another cohort (another root) before p2's turn: it stands",
        [finish("bm1"), finish("c1"), submit(wl("n", "qc", t=6, cpu=1))],
        1,
        0,
        0,
        {},
    ),
    Case(
        "cpu freed in the cohort: p1's reading changed, it is tried and p2 after it (each "
        "a new message); nothing is presumed",
        [finish("b2")],
        0,
        0,
        0,
        {"p1": "2 more needed", "p2": "1 more needed"},
    ),
    Case(
        "a workload queued in a between p1 and p2 (not parked) stops the presumption: p2 "
        "is left parked in its own turn, after it",
        [finish("bm1"), submit(wl("q", "qa", t=6, cpu=4))],
        0,
        0,
        0,
        {"q": "3 more needed"},
    ),
    Case(
        "the offers of a were all left parked at one reading in a pass, and read the same in "
        "the next: left parked whole (quiet), p2 presumed without a look",
        [finish("bm1"), SCHEDULE, finish("bm2")],
        1,
        0,
        1,
        {},
    ),
    Case(
        "quiet must not apply: cpu freed in the cohort since (the root's reading changed)",
        [finish("bm1"), SCHEDULE, finish("b2")],
        0,
        0,
        0,
        {"p1": "2 more needed", "p2": "1 more needed"},
    ),
    Case(
        "quiet must not apply: a's offers changed since (p3 parked in a in between; now it "
        "fits with the memory freed, and is admitted after p2's turn)",
        [finish("bm1"), submit(wl("p3", "qa", t=9, cpu=1, memory="7Gi")), SCHEDULE, finish("bm2")],
        1,
        0,
        0,
        {},
    ),
    Case(
        "quiet must not apply: a's own usage changed since (a2, 3.5Gi, admitted in a, so that "
        "p1's 1Gi would borrow): p1 reads it, is tried (the same message), and p2 is left "
        "parked in its own turn",
        [
            finish("bm1"),
            SCHEDULE,
            submit(wl("a2", "qa", t=0.5, memory="3584Mi")),
            SCHEDULE,
            finish("bm2"),
        ],
        0,
        0,
        0,
        {},
    ),
    Case(
        "a's own usage changed since (a2, 1Gi), but p1 reads the same (its 1Gi still needs no "
        "borrowing: settled.py, _bounds): quiet does not apply (a's own usage version "
        "changed), p1 is left parked in its turn and p2 presumed with it",
        [
            finish("bm1"),
            SCHEDULE,
            submit(wl("a2", "qa", t=0.5, memory="1Gi")),
            SCHEDULE,
            finish("bm2"),
        ],
        1,
        0,
        0,
        {},
    ),
]


def run(
    case: Case, offers: bool, presumes: bool = True
) -> tuple[list[list[Any]], list[Any], tuple[int, int, int], tuple[int, int]]:
    s = Scheduler()
    s.offers, s.presumes = offers, presumes
    s.set_config(world())
    passes = []
    for running in RUNNING:
        s.submit(running)
    passes.append(s.schedule())
    for waiting in PARKED:
        s.submit(waiting)
    passes.append(s.schedule())
    for step in case.change:
        apply(s, step)
    passes.append(s.schedule())
    counts = (s.presumed, s.taken_back, s.quiet_queues)
    return passes, [s.workload_views(), s.queue_stats()], counts, (s.tried, s.left_parked)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason[:60])
def test_presumed_heads(case: Case) -> None:
    passes, views, counts, tries = run(case, offers=True)
    assert (passes, views) == run(case, offers=False)[:2], case.reason
    assert counts == (case.presumed, case.taken_back, case.quiet), case.reason
    # Offered heads, one by one in their turn: the same tries, the same left parked.
    assert tries == run(case, offers=True, presumes=False)[3], case.reason
    notes = {d.ref.name: d.message for d in passes[-1] if isinstance(d, Inadmissible)}
    assert notes.keys() == case.pending.keys(), (case.reason, notes)
    for name, part in case.pending.items():
        assert part in notes[name], (case.reason, notes[name])


def _queue(*offers: float) -> tuple[ClusterQueueQueue, list[Record]]:
    """A queue whose parked records (one shape each) are offered, queue times ``offers``."""
    records: dict[str, Record] = {}
    queue = ClusterQueueQueue(False, records)
    for index, t in enumerate(offers):
        record = Record(wl(f"o{index}", t=t, cpu=index + 1))
        record.key = order_key(0, t, record.wl.ref.uid)
        records[record.wl.ref.uid] = record
        queue.push(record)
        assert queue.head() is record
        queue.heap.clear()  # as a pass leaves a head it parks: popped
        queue.park(record)
    queue.offer_parked()
    return queue, [records[f"uid-o{index}"] for index in range(len(offers))]


def _key(t: float, index: int) -> OrderKey:
    return order_key(0, t, f"uid-o{index}")


PRESUME_CASES = [
    ("every offer above high and holding: all, in order", (5, 7), 1, True, 2),
    (
        "high at the first offer's key: none (its turn is not known to come later)",
        (5, 7),
        5,
        True,
        0,
    ),
    ("high between them: none (the first is not above it)", (5, 7), 6, True, 0),
    ("the first does not hold: none", (5, 7), 1, False, 0),
]


@pytest.mark.parametrize(("reason", "offers", "high", "holds", "taken"), PRESUME_CASES)
def test_presume_takes_offers_in_order_above_high(
    reason: str, offers: tuple[float, ...], high: float, holds: bool, taken: int
) -> None:
    for whole in (False, True):  # one by one (holds), and all at once (presume_all)
        queue, records = _queue(*offers)
        high_key = _key(high, 9)
        if whole and holds:
            items = presume_all(queue, high_key)
        else:
            items = presume(queue, high_key, lambda record: holds)
        assert items == records[:taken], reason
        assert queue.offered == records[taken:][::-1], reason  # the rest still offered
        assert all(record.parked for record in records), reason


def test_presume_all_stops_at_the_queued_head() -> None:
    """A record queued (not parked) between two offers: only the offer before it."""
    queue, records = _queue(5, 7)
    queued = Record(wl("q", t=6, cpu=9))
    queued.key = order_key(0, 6, queued.wl.ref.uid)
    queue.records[queued.wl.ref.uid] = queued
    queue.push(queued)
    assert presume_all(queue, _key(1, 9)) == records[:1]
    assert queue.candidate() is queued


UNDO_CASES = [
    ("the admission's key above every presumed one: all stand", 10, [], 0),
    (
        "between them: the later ones are offered again, the queue's next entry superseded",
        6,
        [7],
        2,
    ),
    ("below them all: all offered again", 4, [5], 3),
]


@pytest.mark.parametrize(("reason", "high", "pushed", "back"), UNDO_CASES)
def test_undo_takes_back_heads_whose_turn_has_not_come(
    reason: str, high: float, pushed: list[float], back: int
) -> None:
    queue, records = _queue(5, 7, 9, 11)
    items = presume(queue, _key(1, 9), lambda record: record is not records[3])
    next_key = records[3].key
    assert items == records[:3] and next_key is not None
    presumed = Presumed()
    presumed.add("co", queue, items, next_key)
    assert presumed.undo("other", _key(1, 9)) == ([], 0)  # another root: nothing
    entries, count = presumed.undo("co", _key(high, 9))
    assert [entry[CLOCK] for entry, _ in entries] == pushed, reason
    assert all(entry_queue is queue for _, entry_queue in entries), reason
    assert count == back, reason
    assert [record.key for record in queue.offered][::-1] == sorted(
        record.key for record in records[3 - back :] if record.key is not None
    ), reason
    superseded = bool(back)
    assert presumed.drop(next_key) is superseded, reason
    assert not presumed.drop(next_key), reason  # dropped once
    assert presumed.undo("co", _key(high, 9)) == ([], 0), reason  # undone once


def _quiet_per_pass(s: Scheduler) -> list[int]:
    """Memory churn in qb (one finishes, one like it comes) while qa's offers stay parked:
    qa's ClusterQueue left parked whole from the second pass on (its count per pass)."""
    quiet = []
    gone = "bm1"
    for index in range(5):
        apply(s, finish(gone))
        s.schedule()
        quiet.append(s.quiet_queues)
        gone = f"bm-churn-{index}"
        apply(s, submit(wl(gone, "qb", memory="2Gi")))
        s.schedule()
    return quiet


@pytest.mark.parametrize(
    "start_over",
    [
        pytest.param(False, id="tables kept: qa is quiet from the second pass"),
        pytest.param(
            True,
            id="tables started over (FAILURES_LIMIT): the queues' readers go with them,"
            " so qa is found quiet again (its readers kept, it never was)",
        ),
    ],
)
def test_quiet_comes_back_after_the_tables_start_over(
    start_over: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Scheduler()
    s.set_config(world())
    for running in RUNNING:
        s.submit(running)
    s.schedule()
    for waiting in PARKED:
        s.submit(waiting)
    s.schedule()
    if start_over:  # the next new shape's reader starts every table over
        monkeypatch.setattr(settled_module, "FAILURES_LIMIT", 1)
        starts = s._settled.starts
        apply(s, submit(wl("new-shape", "qb", cpu=1, memory="3Gi")))
        s.schedule()
        monkeypatch.setattr(settled_module, "FAILURES_LIMIT", 100_000)
        assert s._settled.starts > starts, "else the case proves nothing"
    quiet = _quiet_per_pass(s)
    assert quiet[-1] >= 1, quiet
