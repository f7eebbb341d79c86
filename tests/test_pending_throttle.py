"""Admission's pending-message throttle: material changes go at once, numbers at most 1/s."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from services.admission.pending_throttle import PendingThrottle, said
from shared.events import ContestedResource, WorkloadPending, WorkloadRef

REF = WorkloadRef(namespace="ns", name="w", uid="u1")


def pending(message: str, *, may_help: bool = False, reason: str = "Pending") -> WorkloadPending:
    return WorkloadPending(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        reason=reason,
        message=message,
        preemption_may_help=may_help,
        contested=[ContestedResource("rf", "cpu", 1000)] if may_help else [],
    )


def _but_id(events: list[WorkloadPending]) -> list[WorkloadPending]:
    """The events without their ids: a held event goes out with a new one."""
    return [msgspec.structs.replace(event, id="") for event in events]


def _published(throttle: PendingThrottle, event: WorkloadPending, now: float) -> None:
    """Offer a first report and let its second pass, so that it counts as published."""
    assert not throttle.offer(event, now - 1.0)
    assert _but_id(throttle.due(now)) == _but_id([event])


def test_a_held_event_goes_out_whole_with_a_new_id() -> None:
    """It is kept without its id (half a million are held after a first pass); what goes
    out is the event offered, every other field equal, with an id of its own."""
    throttle = PendingThrottle(1.0)
    offered = pending("2 more needed")
    assert not throttle.offer(offered, 0.0)
    (released,) = throttle.due(1.0)
    assert released.id and released.id != offered.id
    assert msgspec.structs.replace(released, id=offered.id) == offered


# (reason, two workloads' reports, held until, due at, messages released)
BATCHES = [
    (
        "one pass's first reports go out together",
        [(0.0, "u1", "a"), (0.0, "u2", "b")],
        1.0,
        ["a", "b"],
    ),
    ("a later pass's wait its own second", [(0.0, "u1", "a"), (0.5, "u2", "b")], 1.0, ["a"]),
    (
        "the same workload twice: one report, the newest",
        [(0.0, "u1", "a"), (0.5, "u1", "b")],
        1.0,
        ["b"],
    ),
]


@pytest.mark.parametrize(
    ("reason", "offers", "at", "released"), BATCHES, ids=[c[0] for c in BATCHES]
)
def test_held_reports_go_out_by_their_time(
    reason: str, offers: list[tuple[float, str, str]], at: float, released: list[str]
) -> None:
    throttle = PendingThrottle(1.0)
    for now, uid, message in offers:
        event = msgspec.structs.replace(pending(message), workload=WorkloadRef("ns", uid, uid))
        assert not throttle.offer(event, now)
    assert [e.message for e in throttle.due(at)] == released, reason


def test_a_first_report_waits_a_second_unless_preemption_may_help() -> None:
    throttle = PendingThrottle(1.0)
    assert not throttle.offer(pending("2 more needed"), 0.0)
    assert not throttle.offer(pending("3 more needed"), 0.4)
    assert throttle.due(0.9) == []
    assert [e.message for e in throttle.due(1.0)] == ["3 more needed"]
    other = PendingThrottle(1.0)
    assert other.offer(pending("2 more needed", may_help=True), 0.0)  # preemption acts on it


def test_a_first_report_of_a_workload_admitted_meanwhile_is_never_sent() -> None:
    throttle = PendingThrottle(1.0)
    assert not throttle.offer(pending("2 more needed"), 0.0)
    throttle.forget(REF.uid)  # admitted
    assert throttle.due(5.0) == []


def test_material_changes_go_at_once() -> None:
    throttle = PendingThrottle(1.0)
    _published(throttle, pending("2 more needed"), 0.0)
    assert throttle.offer(pending("2 more needed", may_help=True), 0.1)
    assert throttle.offer(pending("x", may_help=True, reason="Inadmissible"), 0.2)
    assert throttle.due(10.0) == []


def test_message_only_changes_are_held_and_the_newest_lands() -> None:
    throttle = PendingThrottle(1.0)
    _published(throttle, pending("2 more needed"), 0.0)
    assert not throttle.offer(pending("3 more needed"), 0.3)
    assert not throttle.offer(pending("4 more needed"), 0.6)
    assert throttle.due(0.9) == []
    assert [e.message for e in throttle.due(1.0)] == ["4 more needed"]
    assert throttle.due(5.0) == []
    # Counted as published at 1.0: the next message-only change waits until 2.0.
    assert not throttle.offer(pending("5 more needed"), 1.5)
    assert throttle.offer(pending("6 more needed"), 2.1)
    assert throttle.due(5.0) == []


def test_forget_drops_what_is_held() -> None:
    throttle = PendingThrottle(1.0)
    _published(throttle, pending("a"), 0.0)
    assert not throttle.offer(pending("b"), 0.5)
    throttle.forget(REF.uid)
    assert throttle.due(5.0) == []
    assert not throttle.offer(pending("c"), 0.6)  # nothing known of it: a first report again


def test_an_older_hold_never_releases_a_newer_one_early() -> None:
    """Held until 1.0, published at once at 0.5 (a material change), held again until 1.5:
    the entry left from the first hold must not send the second at 1.0."""
    throttle = PendingThrottle(1.0)
    assert not throttle.offer(pending("2 more needed"), 0.0)  # first report, until 1.0
    assert throttle.offer(pending("2 more needed", may_help=True), 0.5)
    assert not throttle.offer(pending("3 more needed", may_help=True), 0.7)  # until 1.5
    assert throttle.due(1.2) == []
    assert [e.message for e in throttle.due(1.5)] == ["3 more needed"]


# (reason, steps: (now, "offer"/"offer!" (may help)/"forget", message), dues: (at, released))
ENDED_HOLDS: list[tuple[str, list[tuple[float, str, str]], list[tuple[float, list[str]]]]] = [
    (
        "forgotten, then a first report again in the same pass: one entry left, sent once",
        [(0.0, "offer", "a"), (0.0, "forget", ""), (0.0, "offer", "b")],
        [(1.0, ["b"]), (9.0, [])],
    ),
    (
        "published at once, held again at the same time: its old entry is skipped",
        [(0.0, "offer", "a"), (0.0, "offer!", "b"), (0.0, "offer!", "c")],
        [(1.0, ["c"]), (9.0, [])],
    ),
    (
        "forgotten and never held again: nothing, and a later hold goes out on time",
        [(0.0, "offer", "a"), (0.5, "forget", ""), (2.0, "offer", "b")],
        [(1.0, []), (2.9, []), (3.0, ["b"])],
    ),
    (
        "held, published, held, published, held: only the last goes, at its own time",
        [
            (0.0, "offer", "a"),
            (0.2, "offer!", "b"),
            (0.4, "offer!", "c"),
            (2.0, "offer", "d"),
            (2.1, "offer", "e"),
        ],
        [(1.0, []), (1.3, []), (2.9, []), (3.0, ["e"]), (9.0, [])],
    ),
]


@pytest.mark.parametrize(("reason", "steps", "dues"), ENDED_HOLDS, ids=[c[0] for c in ENDED_HOLDS])
def test_an_ended_hold_never_sends_or_hastens_a_later_one(
    reason: str, steps: list[tuple[float, str, str]], dues: list[tuple[float, list[str]]]
) -> None:
    """A hold that ended (published at once, or forgotten) leaves its entry behind: it must
    neither send the workload's next hold early nor send anything twice."""
    throttle = PendingThrottle(1.0)
    for now, step, message in steps:
        if step == "forget":
            throttle.forget(REF.uid)
        else:
            throttle.offer(pending(message, may_help=step == "offer!"), now)
    for at, released in dues:
        assert [e.message for e in throttle.due(at)] == released, (reason, at)


PASS_TIME = datetime(2026, 1, 1, tzinfo=UTC)  # a pass's reports share its moment


def _of(uid: str, message: str = "2 more needed", **fields: object) -> WorkloadPending:
    ref = WorkloadRef("ns", uid, uid)
    return msgspec.structs.replace(
        pending(message), **({"workload": ref, "time": PASS_TIME} | fields)
    )


# (reason, the second workload's report, whether the two held share one saying)
SAYINGS: list[tuple[str, WorkloadPending, bool]] = [
    ("the same saying: kept once", _of("u2"), True),
    ("another message: its own", _of("u2", "3 more needed"), False),
    ("another priority: its own", _of("u2", priority=5), False),
    ("another queue: its own", _of("u2", cluster_queue="other"), False),
    ("another moment (another pass): its own", _of("u2", time=PASS_TIME.replace(hour=1)), False),
]


@pytest.mark.parametrize(("reason", "second", "shared"), SAYINGS, ids=[c[0] for c in SAYINGS])
def test_held_reports_alike_share_a_saying_and_go_out_as_offered(
    reason: str, second: WorkloadPending, shared: bool
) -> None:
    """Held alike, two reports keep one saying; each goes out as it was offered (its own
    workload, every other field), with an id of its own."""
    throttle = PendingThrottle(1.0)
    first = _of("u1")
    assert not throttle.offer(first, 0.0)
    assert not throttle.offer(second, 0.0)
    held = throttle._held  # the lean form is the point of the case
    assert (held["u1"] is held["u2"]) is shared, reason
    out = throttle.due(1.0)
    assert _but_id(out) == _but_id([first, second]), reason
    assert len({e.id for e in out}) == 2 and all(out), reason


def test_a_newer_message_for_one_leaves_the_others_saying() -> None:
    throttle = PendingThrottle(1.0)
    for uid in ("u1", "u2"):
        assert not throttle.offer(_of(uid), 0.0)
    assert not throttle.offer(_of("u1", "5 more needed"), 0.5)
    assert [(e.workload.uid, e.message) for e in throttle.due(1.0)] == [
        ("u1", "5 more needed"),
        ("u2", "2 more needed"),
    ]


# (reason, offers in turn: (now, uid, message, preemption may help))
ALIKE_CASES: list[tuple[str, list[tuple[float, str, str, bool]]]] = [
    ("first reports held", [(0.0, "u1", "a", False), (0.0, "u2", "a", False)]),
    ("preemption may help: published at once", [(0.0, "u1", "a", True), (0.0, "u2", "a", True)]),
    (
        "published, then the message alone changes: held its second",
        [(0.0, "u1", "a", True), (0.5, "u1", "b", True), (2.0, "u1", "c", True)],
    ),
    ("held, then newer: the newest goes out", [(0.0, "u1", "a", False), (0.2, "u1", "b", False)]),
]


@pytest.mark.parametrize(("reason", "offers"), ALIKE_CASES, ids=[c[0] for c in ALIKE_CASES])
def test_what_a_report_alike_said_is_what_its_own_says(
    reason: str, offers: list[tuple[float, str, str, bool]]
) -> None:
    """offer(alike=said(...)) of a report alike in all but its workload and id decides and
    holds exactly as offer() finding it from the report itself."""
    own, told = PendingThrottle(1.0), PendingThrottle(1.0)
    for now, uid, message, may_help in offers:
        event = msgspec.structs.replace(
            pending(message, may_help=may_help), workload=WorkloadRef("ns", uid, uid)
        )
        other = msgspec.structs.replace(event, workload=WorkloadRef("ns", "x", "x"), id="y")
        assert own.offer(event, now) == told.offer(event, now, said(other)), reason
    assert _but_id(own.due(10.0)) == _but_id(told.due(10.0)), reason


def _first_reports(count: int) -> list[WorkloadPending]:
    return [
        msgspec.structs.replace(
            pending("1 more needed"), workload=WorkloadRef("ns", f"w{i}", f"u{i}")
        )
        for i in range(count)
    ]


def test_released_in_pieces_in_order_each_made_when_reached() -> None:
    """A pass's first reports all come due at once: they go in pieces of at most ``size``,
    in the order they were held, and a piece counts as published only once it is made
    (a report the caller has not reached yet can still be forgotten, and is not sent)."""
    throttle = PendingThrottle(1.0)
    reports = _first_reports(7)
    for report in reports:
        assert not throttle.offer(report, 0.0)
    pieces = throttle.due_pieces(2.0, 3)
    first = next(pieces)
    assert [e.workload.name for e in first] == ["w0", "w1", "w2"]
    throttle.forget("u4")  # admitted meanwhile
    rest = list(pieces)
    assert [[e.workload.name for e in piece] for piece in rest] == [["w3", "w5", "w6"]]
    assert throttle.due(3.0) == []


def test_a_release_stopped_midway_leaves_the_rest_due() -> None:
    """The caller stopped after the first piece (its publish failed): what it did not take
    is due as it was, and comes out at the next look, once each."""
    throttle = PendingThrottle(1.0)
    for report in _first_reports(5):
        assert not throttle.offer(report, 0.0)
    pieces = throttle.due_pieces(2.0, 2)
    assert [e.workload.name for e in next(pieces)] == ["w0", "w1"]
    pieces.close()
    assert [e.workload.name for e in throttle.due(2.5)] == ["w2", "w3", "w4"]
    assert throttle.due(9.0) == []


def test_a_release_stopped_midway_keeps_what_was_held_meanwhile() -> None:
    """While a release is paused, a report is held until the very time the paused batch
    was due: the rest of that batch is put back in front of it, both come out, in order."""
    throttle = PendingThrottle(1.0)
    reports = _first_reports(4)
    for report in reports[:3]:
        assert not throttle.offer(report, 0.0)
    pieces = throttle.due_pieces(2.0, 1)
    assert [e.workload.name for e in next(pieces)] == ["w0"]
    assert not throttle.offer(reports[3], 0.0)  # due at 1.0, as the paused batch
    pieces.close()
    assert [e.workload.name for e in throttle.due(2.5)] == ["w1", "w2", "w3"]


# (why, offers after "2 more needed" was published at 0: (time, message, priority), then
# what goes out by 5.0: sent at once by offer, or released by due)
NO_NEWS_CASES: list[tuple[str, list[tuple[float, str, int]], list[str]]] = [
    ("the same report again within the interval: not sent", [(0.3, "2 more needed", 0)], []),
    ("the same report after the interval: not sent either", [(3.0, "2 more needed", 0)], []),
    (
        "changed and changed back within the interval: the held one ends, nothing goes out",
        [(0.3, "3 more needed", 0), (0.6, "2 more needed", 0)],
        [],
    ),
    (
        "changed back, then changed again: the newest lands once",
        [(0.3, "3 more needed", 0), (0.6, "2 more needed", 0), (0.7, "4 more needed", 0)],
        ["4 more needed"],
    ),
    (
        "the same message at another priority (an ageing boost) is news: it lands",
        [(0.3, "2 more needed", 5)],
        ["2 more needed"],
    ),
]


@pytest.mark.parametrize(("why", "offers", "out"), NO_NEWS_CASES, ids=[c[0] for c in NO_NEWS_CASES])
def test_a_report_that_says_what_was_published_is_no_news(
    why: str, offers: list[tuple[float, str, int]], out: list[str]
) -> None:
    throttle = PendingThrottle(1.0)
    _published(throttle, pending("2 more needed"), 0.0)
    sent = []
    for at, message, priority in offers:
        event = msgspec.structs.replace(pending(message), priority=priority)
        if throttle.offer(event, at):
            sent.append(message)
    sent += [e.message for e in throttle.due(5.0)]
    assert sent == out, why
