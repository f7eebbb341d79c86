"""What a consumer takes from one batch message (shared/bus/batches.py ``expand``) and the
subjects and families of events (shared/events.py ``subject_for``,
shared/event_families.py ``subject_family_of``), as tables: the shortcuts that save per-event work (a family from the type, a subject built
only when something reads it, counts per batch) must decide exactly as before."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg
from prometheus_client import REGISTRY

from shared.bus.batches import BatchView, RecentIds, expand
from shared.bus.pulling import MESSAGES_READ, ReadCounts, decode_batch, read_counter
from shared.event_families import all_of_family, subject_family_of
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
    decode_event,
    encode_event,
    subject_for,
)
from shared.subjects import subject_family

WORKLOAD = {"namespace": "team-a", "name": "job-1", "uid": "u1"}


def event(type_name: str, workload: dict[str, str] | None = None, /, **fields: Any) -> AnyEvent:
    """An event of type ``type_name`` about ``workload`` (team-a/job-1 if not given)."""
    body = {"type": type_name, "source": "admission", "workload": workload or WORKLOAD, **fields}
    converted: AnyEvent = msgspec.convert(body, AnyEvent)
    return converted


ADMITTED: dict[str, Any] = {
    "cluster_queue": "cq-1",
    "local_queue": "lq",
    "priority": 0,
    "generation": 1,
    "assignments": [],
}
PENDING: dict[str, Any] = {"cluster_queue": "cq-1", "reason": "Pending", "message": "-"}

# (event, its subject, why)
SUBJECT_CASES: list[tuple[AnyEvent, str, str]] = [
    (
        event(
            "WorkloadSubmitted",
            kind="Job",
            queue_name="lq",
            pod_sets=[],
            created="2025-01-01T00:00:00Z",
        ),
        "berth.wl.submitted.team-a.job-1",
        "a watcher fact: its verb, then namespace and name",
    ),
    (event("WorkloadStarted", generation=1), "berth.wl.started.team-a.job-1", "started"),
    (event("WorkloadPodsReady", generation=1), "berth.wl.podsready.team-a.job-1", "pods ready"),
    (
        event("WorkloadFinished", generation=1, succeeded=True),
        "berth.wl.finished.team-a.job-1",
        "finished",
    ),
    (
        event("WorkloadEvicted", generation=1, reason="x"),
        "berth.wl.evicted.team-a.job-1",
        "evicted",
    ),
    (event("WorkloadDeleted"), "berth.wl.deleted.team-a.job-1", "deleted"),
    (
        event("WorkloadDeleted", {"namespace": "a.b", "name": "x*y>z", "uid": "u"}),
        "berth.wl.deleted.a_b.x_y_z",
        "dots and wildcards in names become _: one token each",
    ),
    (
        event("WorkloadDeleted", {"namespace": "", "name": "n", "uid": "u"}),
        "berth.wl.deleted._.n",
        "an empty name is still a token",
    ),
    (event("WorkloadPending", **PENDING), "berth.cq.cq-1.pending.team-a.job-1", "pending"),
    (event("WorkloadAdmitted", **ADMITTED), "berth.cq.cq-1.admitted.team-a.job-1", "admitted"),
    (
        event("WorkloadAdmitted", **ADMITTED, reserved_only=True),
        "berth.cq.cq-1.reserved.team-a.job-1",
        "a reservation is not an admission: same type, other subject and family",
    ),
    (
        event("WorkloadAdmitted", **{**ADMITTED, "cluster_queue": "c.q"}),
        "berth.cq.c_q.admitted.team-a.job-1",
        "a ClusterQueue with a dot is one token",
    ),
    (
        event("EvictionRequested", cluster_queue="cq-1", generation=1, reason="x"),
        "berth.cq.cq-1.evict.team-a.job-1",
        "evict",
    ),
    (event("CreateWorkload", object={}), "berth.cmd.create.team-a.job-1", "command create"),
    (event("DeleteWorkload"), "berth.cmd.delete.team-a.job-1", "command delete"),
    (event("SubmitWorkload", object={}), "berth.cmd.submit.team-a.job-1", "command submit"),
    (event("RemoveWorkload"), "berth.cmd.remove.team-a.job-1", "command remove"),
    (event("SetWorkloadActive", active=True), "berth.cmd.active.team-a.job-1", "command active"),
    (event("PriorityBoosted", boost=2), "berth.job.boost.team-a.job-1", "a boost"),
    (
        event("JobStatusChanged", job_id=7, status="RUNNING", recoveries=0),
        "berth.job.status.7",
        "a managed job's status: by its id",
    ),
    (event("LeaderElected", role="admission", holder="h"), "berth.lease.admission", "marker"),
    (
        event("AdmissionCheckUpdated", check="prov.a", state="Ready"),
        "berth.check.prov_a.team-a.job-1",
        "a check's answer: the check is one token",
    ),
]


@pytest.mark.parametrize(
    ("sample", "subject", "why"), SUBJECT_CASES, ids=[c[2] for c in SUBJECT_CASES]
)
def test_subject_and_family_of_each_event(sample: AnyEvent, subject: str, why: str) -> None:
    assert subject_for(sample) == subject, why
    assert subject_family_of(sample) == subject_family(subject), why


def test_no_event_is_tracked_by_the_garbage_collector() -> None:
    """Events are plain data (shared/events.py): neither an event nor its parts (pod sets,
    assignments) is tracked, decoded or built, so a batch of them sets off no collection."""
    for sample, _, why in SUBJECT_CASES:
        decoded = decode_event(encode_event(sample))
        assert not gc.is_tracked(sample) and not gc.is_tracked(decoded), why
    admission = admitted(
        "a", assignments=[{"pod_set": "p", "count": 1, "flavors": {}, "usage": {}}]
    )
    assert isinstance(admission, WorkloadAdmitted)
    assert not gc.is_tracked(admission.assignments[0])


def test_all_of_family_agrees_with_each_events_family() -> None:
    """The per-batch check (``all_of_family``) says of one event what its family says, for
    every family there is: true for its own, false for every other."""
    families = {subject_family_of(sample) for sample, _, _ in SUBJECT_CASES}
    for sample, _, why in SUBJECT_CASES:
        for family in families:
            assert all_of_family([sample], family) == (subject_family_of(sample) == family), why


def test_every_event_type_has_a_subject_case() -> None:
    """A new event type gets a row above (its family shortcut is proven there)."""
    from shared.events import SUBJECT_PARTS

    assert {type(sample) for sample, _, _ in SUBJECT_CASES} == set(SUBJECT_PARTS)


def admitted(name: str, **extra: Any) -> AnyEvent:
    fields = {**ADMITTED, "id": f"admitted-{name}", **extra}
    return event("WorkloadAdmitted", {"namespace": "ns", "name": name, "uid": name}, **fields)


def pending(name: str) -> AnyEvent:
    fields = {**PENDING, "id": f"pending-{name}"}
    return event("WorkloadPending", {"namespace": "ns", "name": name, "uid": name}, **fields)


def batch(subject: str, events: list[AnyEvent]) -> Msg:
    payload = b"[" + b",".join(encode_event(e) for e in events) + b"]"
    return Msg(None, subject=subject, data=payload)  # type: ignore[arg-type]


# (events, family, whether all are of it, why)
ALL_OF_FAMILY_CASES: list[tuple[list[AnyEvent], str, bool, str]] = [
    ([], "cq.*.admitted", True, "no event: none is of another family"),
    ([admitted("a"), admitted("b")], "cq.*.admitted", True, "admissions in an admitted batch"),
    (
        [admitted("a"), admitted("b", reserved_only=True)],
        "cq.*.admitted",
        False,
        "one reservation among admissions: the type alone must not pass it",
    ),
    (
        [admitted("a", reserved_only=True), admitted("b")],
        "cq.*.reserved",
        False,
        "one admission among reservations",
    ),
    (
        [admitted("a", reserved_only=True), admitted("b", reserved_only=True)],
        "cq.*.reserved",
        True,
        "reservations in a reserved batch",
    ),
    ([pending("a"), admitted("b")], "cq.*.pending", False, "two types: one is not the family's"),
    ([admitted("a")], "cq.*.pending", False, "one type, another family's"),
    ([pending("a")], "cq.*.bogus", False, "a family no event type has"),
]


@pytest.mark.parametrize(
    ("events", "family", "expected", "why"),
    ALL_OF_FAMILY_CASES,
    ids=[c[-1] for c in ALL_OF_FAMILY_CASES],
)
def test_all_of_family_judges_a_batch_as_one_event_at_a_time(
    events: list[AnyEvent], family: str, expected: bool, why: str
) -> None:
    assert all_of_family(events, family) is expected, why
    one_at_a_time = all(subject_family_of(e) == family for e in events)
    assert one_at_a_time is expected, why


ALL_ADMITTED = ["berth.cq.*.admitted.>"]
Keep = Callable[[str], bool] | None

# (batch subject, its events, the consumer's patterns (None: no view), keep,
#  ids kept, events counted as sent, how many refused, why)
EXPAND_CASES: list[tuple[str, list[AnyEvent], list[str] | None, Keep, list[str], int, int, str]] = [
    (
        "berth.b.cq.admitted",
        [admitted("a"), admitted("b")],
        ALL_ADMITTED,
        None,
        ["admitted-a", "admitted-b"],
        2,
        0,
        "a consumer of the whole family keeps every event, in order",
    ),
    (
        "berth.b.cq.admitted",
        [admitted("a"), admitted("b", cluster_queue="cq-2")],
        ["berth.cq.cq-2.>"],
        None,
        ["admitted-b"],
        2,
        0,
        "a pattern narrower than the family: each event's own subject is matched",
    ),
    (
        "berth.b.cq.admitted",
        [admitted("a"), admitted("b")],
        ALL_ADMITTED,
        lambda subject: subject.endswith(".b"),
        ["admitted-b"],
        2,
        0,
        "the service's keep reads each event's subject; both count as sent",
    ),
    (
        "berth.b.cq.admitted",
        [admitted("a"), admitted("b", cluster_queue="cq-2"), admitted("c", cluster_queue="cq-2")],
        ["berth.cq.cq-2.>"],
        lambda subject: not subject.endswith(".c"),
        ["admitted-b"],
        3,
        0,
        "a pattern inside the family and a keep: an event must pass both",
    ),
    (
        "berth.b.cq.pending",
        [pending("a"), admitted("x"), pending("b")],
        ["berth.cq.>"],
        None,
        ["pending-a", "pending-b"],
        2,
        1,
        "an admission smuggled into a pending batch is refused and not counted as sent",
    ),
    (
        "berth.b.cq.admitted",
        [admitted("a", reserved_only=True), admitted("b")],
        ALL_ADMITTED,
        None,
        ["admitted-b"],
        1,
        1,
        "a reservation is cq.*.reserved: its type alone does not make it an admission",
    ),
    (
        "berth.b.cq.reserved",
        [admitted("a", reserved_only=True)],
        ["berth.cq.*.reserved.>"],
        None,
        ["admitted-a"],
        1,
        0,
        "and in a reserved batch it belongs",
    ),
    (
        "berth.b.cq.admitted",
        [admitted("a"), admitted("a"), admitted("b")],
        ALL_ADMITTED,
        None,
        ["admitted-a", "admitted-b"],
        3,
        0,
        "an id taken already is dropped as a repeat (counted as sent)",
    ),
    (
        "berth.b.cq.admitted",
        [admitted("a"), admitted("a")],
        None,
        None,
        ["admitted-a", "admitted-a"],
        2,
        0,
        "without a view nothing is remembered: no repeat is dropped",
    ),
    (
        "berth.b.cq.bogus",
        [admitted("a")],
        ALL_ADMITTED,
        None,
        [],
        0,
        1,
        "a batch subject of no batched family is refused whole",
    ),
]


@pytest.mark.parametrize(
    ("subject", "events", "patterns", "keep", "kept", "sent", "refused", "why"),
    EXPAND_CASES,
    ids=[c[-1] for c in EXPAND_CASES],
)
def test_what_a_consumer_takes_from_a_batch(
    subject: str,
    events: list[AnyEvent],
    patterns: list[str] | None,
    keep: Keep,
    kept: list[str],
    sent: int,
    refused: int,
    why: str,
) -> None:
    reasons: list[str] = []
    delivered: Counter[str] = Counter()
    view = None if patterns is None else BatchView.of(patterns, batching=True)
    taken = expand(batch(subject, events), view, keep, lambda _, r: reasons.append(r), delivered)
    assert [e.id for e in taken] == kept, why
    assert sum(delivered.values()) == sent, why
    assert len(reasons) == refused, why


def test_read_counts_of_a_batch_are_per_event_under_its_family() -> None:
    """decode_batch counts a batch's events at once: as many as were sent and kept, under
    the batch's family; a family nothing was kept of is not counted as decoded at all."""
    counts = ReadCounts()
    view = BatchView.of(["berth.cq.>"], batching=True)
    messages = [
        batch("berth.b.cq.admitted", [admitted("a"), admitted("b"), admitted("c")]),
        batch("berth.b.cq.pending", [pending("a")]),
    ]
    events = decode_batch(messages, lambda s: not s.endswith(".a"), None, counts, view)
    assert [e.id for e in events] == ["admitted-b", "admitted-c"]
    assert counts.delivered == {"cq.*.admitted": 3, "cq.*.pending": 1}
    assert counts.decoded == {"cq.*.admitted": 2}


# (ids in the order taken, the ones taken for the first time, why)
RECENT_CASES = [
    (["a", "b", "a"], ["a", "b"], "a repeat within what is remembered is dropped"),
    (
        ["a", "b", "a", "c", "a", "b"],
        ["a", "b", "c", "a", "b"],
        "two remembered: c forgets a, so a is new again (and forgets b)",
    ),
    (["a", "a", "a"], ["a"], "a repeat is not remembered again: it forgets nothing"),
]


@pytest.mark.parametrize(("ids", "fresh", "why"), RECENT_CASES, ids=[c[2] for c in RECENT_CASES])
def test_recent_ids_remember_the_last_few(ids: list[str], fresh: list[str], why: str) -> None:
    recent = RecentIds(size=2)
    one_by_one = [e.id for name in ids for e in recent.firsts([admitted(name)])]
    assert [e.id for e in RecentIds(size=2).firsts([admitted(n) for n in ids])] == one_by_one
    assert one_by_one == [f"admitted-{name}" for name in fresh], why


# (how many ids are remembered, the takes in order, what each take keeps, why): a take
# without a repeat is remembered at once; it must keep and forget as one id at a time would.
TAKE_CASES = [
    (3, [["a", "b"], ["c"], ["a"]], [["a", "b"], ["c"], []], "all three still remembered"),
    (
        3,
        [["a", "b"], ["c", "d"], ["b"], ["a"]],
        [["a", "b"], ["c", "d"], [], ["a"]],
        "c, d forgot a, not b: the oldest go first, even from the middle of a take",
    ),
    (
        2,
        [["a", "b", "c", "d"], ["a"], ["d"]],
        [["a", "b", "c", "d"], ["a"], []],
        "a take bigger than the window keeps all of it and remembers its last ids",
    ),
    (
        2,
        [["a", "b"], ["c", "a", "a"]],
        [["a", "b"], ["c", "a"]],
        "a repeat inside the take: one at a time, c forgets a, so a is new, then a repeat",
    ),
    (
        3,
        [["a", "b"], ["c", "b", "d"], ["a"], ["c"]],
        [["a", "b"], ["c", "d"], ["a"], []],
        "one remembered id in the take: the rest are taken, the repeat remembers nothing",
    ),
    (2, [[], ["a"], []], [[], ["a"], []], "an empty take keeps and forgets nothing"),
]


@pytest.mark.parametrize(
    ("size", "takes", "kept", "why"), TAKE_CASES, ids=[c[-1] for c in TAKE_CASES]
)
def test_recent_ids_judge_a_take_as_one_id_at_a_time(
    size: int, takes: list[list[str]], kept: list[list[str]], why: str
) -> None:
    whole, single = RecentIds(size=size), RecentIds(size=size)
    for take, expected in zip(takes, kept, strict=True):
        events = [admitted(name) for name in take]
        one_by_one = [e.id for e in events for e in single.firsts([e])]
        assert [e.id for e in whole.firsts(events)] == one_by_one, why
        assert one_by_one == [f"admitted-{name}" for name in expected], why
        assert whole.ids == single.ids and whole.count == single.count <= size, why


@pytest.mark.parametrize("size", [0, -1])
def test_recent_ids_refuse_a_window_of_no_id(size: int) -> None:
    with pytest.raises(ValueError, match="at least one event id"):
        RecentIds(size=size)


# (labels of a first series, labels of a second, whether they are one series, why)
READ_COUNTER_CASES = [
    (("t-admission", "cq.*.admitted", "delivered"),) * 2 + (True, "the same labels: kept"),
    (
        ("t-admission", "cq.*.admitted", "delivered"),
        ("t-admission", "cq.*.admitted", "decoded"),
        False,
        "another stage: another series",
    ),
    (
        ("t-admission", "cq.*.admitted", "delivered"),
        ("t-watcher", "cq.*.admitted", "delivered"),
        False,
        "another consumer",
    ),
    (
        ("t-admission", "cq.*.admitted", "delivered"),
        ("t-admission", "cq.*.pending", "delivered"),
        False,
        "another subject family",
    ),
]


@pytest.mark.parametrize(
    ("first", "second", "same", "why"), READ_COUNTER_CASES, ids=[c[-1] for c in READ_COUNTER_CASES]
)
def test_read_counter_is_the_series_of_its_labels(
    first: tuple[str, str, str], second: tuple[str, str, str], same: bool, why: str
) -> None:
    """A kept series is the one ``labels()`` gives, and counts what it is given there."""
    assert read_counter(*first) is MESSAGES_READ.labels(*first), why
    assert (read_counter(*first) is read_counter(*second)) is same, why
    labels = dict(zip(("consumer", "subject", "stage"), second, strict=True))

    def counted() -> float:
        return REGISTRY.get_sample_value("berth_bus_messages_read_total", labels) or 0.0

    before = counted()
    read_counter(*first).inc(2)
    assert counted() - before == (2 if same else 0), why
