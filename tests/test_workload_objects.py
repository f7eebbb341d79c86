"""services/admission/workload_objects.py: records that report the same lone condition share
one dict of conditions, and a change to one record never shows in another's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from services.admission.activation import queued
from services.admission.interning import Interner
from services.admission.model import QueuedWorkload
from services.admission.workload_objects import _NOT_READY, WorkloadRecord, render_workload
from shared.events import (
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadPodsReady,
    WorkloadRef,
)
from tests.test_kube_status import ADMITTED, SUBMITTED

AT = datetime(2026, 1, 1, tzinfo=UTC)


def report(uid: str, message: str = "2 more needed", at: datetime = AT) -> WorkloadPending:
    return WorkloadPending(
        source="admission",
        workload=WorkloadRef("ns", uid, uid),
        cluster_queue="cq",
        reason="Pending",
        message=message,
        time=at,
    )


def record(uid: str) -> WorkloadRecord:
    submitted = msgspec.structs.replace(SUBMITTED, workload=WorkloadRef("ns", uid, uid))
    return WorkloadRecord.of(submitted)


Step = tuple[str, Callable[[WorkloadRecord], None]]  # (which record, what happens to it)


def pending(message: str = "2 more needed", at: datetime = AT) -> Callable[[WorkloadRecord], None]:
    return lambda one: one.on_pending(report(one.submitted.workload.uid, message, at))


def admitted(one: WorkloadRecord) -> None:
    one.on_admitted(ADMITTED)


def ready(one: WorkloadRecord) -> None:
    ref = one.submitted.workload
    one.on_pods_ready(
        WorkloadPodsReady(
            source="t", workload=ref, generation=ADMITTED.generation, ready=True, time=AT
        )
    )


def finished(one: WorkloadRecord) -> None:
    ref = one.submitted.workload
    one.on_finished(
        WorkloadFinished(
            source="t", workload=ref, generation=ADMITTED.generation, succeeded=True, time=AT
        )
    )


# (reason, what happens to records a and b in turn, whether they share one dict after it)
SHARING: list[tuple[str, list[Step], bool]] = [
    ("the same report: one dict", [("a", pending()), ("b", pending())], True),
    ("another message: another dict", [("a", pending()), ("b", pending("3 more"))], False),
    (
        "another time: another dict",
        [("a", pending()), ("b", pending(at=AT.replace(hour=1)))],
        False,
    ),
    (
        "one admitted after both reported: the other's stays pending",
        [("a", pending()), ("b", pending()), ("a", admitted)],
        False,
    ),
    (
        "a new report of one: the other keeps its own",
        [("a", pending()), ("b", pending()), ("a", pending("9 more"))],
        False,
    ),
    (
        "admitted alike (same queue, same moment): one dict",
        [("a", admitted), ("b", admitted)],
        True,
    ),
    (
        "admitted alike, then one reported pending again: the other stays admitted",
        [("a", admitted), ("b", admitted), ("a", pending())],
        False,
    ),
    (
        "both moved to the same new report: one dict again",
        [("a", pending()), ("b", pending()), ("a", pending("9 more")), ("b", pending("9 more"))],
        True,
    ),
    (
        "admitted alike from one shared report: the transition is taken again, one dict",
        [("a", pending()), ("b", pending()), ("a", admitted), ("b", admitted)],
        True,
    ),
    (
        "admitted alike from different reports: not a's transition, but an equal set, kept once",
        [("a", pending()), ("b", pending("3 more")), ("a", admitted), ("b", admitted)],
        True,
    ),
    (
        "the same new report from another dict before: a's transition kept its old time, "
        "b's must not (b had no report)",
        [
            ("a", pending()),
            ("a", pending("3 more", AT.replace(hour=1))),
            ("b", pending("3 more", AT.replace(hour=1))),
        ],
        False,
    ),
    (
        "one's own event (finished) after alike admissions: the other stays admitted",
        [("a", admitted), ("b", admitted), ("a", finished)],
        False,
    ),
    (
        "each one's own event, alike: its own dict (an event's time is its own)",
        [("a", admitted), ("b", admitted), ("a", ready), ("b", ready)],
        False,
    ),
]


@pytest.mark.parametrize(("reason", "steps", "shared"), SHARING, ids=[c[0] for c in SHARING])
def test_a_lone_condition_is_shared_and_never_written_through(
    reason: str, steps: list[Step], shared: bool
) -> None:
    records = {"a": record("a"), "b": record("b")}
    b_alone = record("b")  # b with only its own steps: what b must show whatever a did
    for who, step in steps:
        step(records[who])
        if who == "b":
            step(b_alone)
    a, b = records["a"], records["b"]
    assert (a.conditions is b.conditions) is shared, reason
    assert b.conditions == b_alone.conditions, reason
    assert render_workload(b, {}) == render_workload(b_alone, {}), reason


def test_a_shared_report_renders_as_its_own() -> None:
    """What `berth get workloads` shows of two records sharing a report: each its own
    condition with the reason, message and time of the report."""
    a, b = record("a"), record("b")
    a.on_pending(report("a"))
    b.on_pending(report("b"))
    assert a.conditions is b.conditions
    for one in (a, b):
        (condition,) = render_workload(one, {})["status"]["conditions"]
        assert condition == {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "2 more needed",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }


def test_the_transition_time_stays_when_the_status_does() -> None:
    """A new message with the same status keeps lastTransitionTime (Kueue's rule), shared or not."""
    a = record("a")
    a.on_pending(report("a"))
    a.on_pending(report("a", "3 more needed", at=AT.replace(hour=2)))
    assert a.conditions["QuotaReserved"].time == AT
    assert a.conditions["QuotaReserved"].message == "3 more needed"


# (reason, creation time as submitted, whether the record needs a datetime beside the float)
CREATED: list[tuple[str, datetime, bool]] = [
    ("UTC, whole seconds: the queue time says it", datetime(2026, 1, 1, tzinfo=UTC), False),
    (
        "UTC with microseconds: the float round-trips exactly",
        datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC),
        False,
    ),
    (
        "another offset: kept as given (isoformat shows it)",
        datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))),
        True,
    ),
]


@pytest.mark.parametrize(("reason", "created", "kept"), CREATED, ids=[c[0] for c in CREATED])
def test_the_record_gives_back_the_kept_event(reason: str, created: datetime, kept: bool) -> None:
    """One object per workload, the record and the core's entry: what it gives back is the
    event as the interner kept it (every field the displays read), its creation exact."""
    event = Interner().submitted(
        msgspec.structs.replace(SUBMITTED, created=created, labels={"app": "x"}, term=0)
    )
    one = WorkloadRecord.of(event)
    entry = queued(event)  # the core's entry as any other path makes it
    for name in QueuedWorkload.__struct_fields__:  # the record is that entry, field by field
        assert getattr(one, name) == getattr(entry, name), (reason, name)
    assert (one.shown[3] is not None) is kept, reason
    assert one.submitted == event, reason
    assert one.created.isoformat() == created.isoformat(), reason


# (reason, how many times a is evicted, how many times b)
REQUEUES: list[tuple[str, int, int]] = [
    ("neither evicted: one shared value, no requeue state", 0, 0),
    ("one evicted: its count alone", 1, 0),
    ("both evicted, a twice: each its own count", 2, 1),
]


@pytest.mark.parametrize(("reason", "a_times", "b_times"), REQUEUES, ids=[c[0] for c in REQUEUES])
def test_a_requeue_count_is_the_records_own(reason: str, a_times: int, b_times: int) -> None:
    """Kind, labels, annotations and the count are one shared value while the count is 0; a
    record evicted counts for itself alone (status.requeueState)."""
    a, b = record("a"), record("b")
    assert a.shown is b.shown, reason
    for one, times in ((a, a_times), (b, b_times)):
        for _ in range(times):
            one.on_admitted(ADMITTED)
            one.on_evicted(
                WorkloadEvicted(
                    source="watcher", workload=one.ref, generation=1, reason="Preempted"
                )
            )
    for one, times in ((a, a_times), (b, b_times)):
        assert one.requeue_count == times, reason
        shown = render_workload(one, {})["status"].get("requeueState")
        assert shown == ({"count": times} if times else None), reason
        assert (one.kind, one.labels) == (SUBMITTED.kind, SUBMITTED.labels), reason


def _admission(one: WorkloadRecord, queue: str, at: datetime) -> None:
    one.on_admitted(
        msgspec.structs.replace(ADMITTED, workload=one.ref, cluster_queue=queue, time=at)
    )


def _stepwise(one: WorkloadRecord, queue: str, at: datetime) -> None:
    """An admission without checks as on_admitted set it condition by condition (the rule
    admitted_conditions keeps in one step): the reference."""
    one.admission = msgspec.structs.replace(
        ADMITTED, workload=one.ref, cluster_queue=queue, time=at
    )
    message = f"Quota reserved in ClusterQueue {queue}"
    one._set_shared("QuotaReserved", "True", "QuotaReserved", message, at)
    one._set_shared("Admitted", "True", "Admitted", "The workload is admitted", at)
    if "PodsReady" in one.conditions:
        one._set_shared("PodsReady", "False", "WaitForStart", _NOT_READY, at)
    if "Evicted" in one.conditions:
        one._set_shared("Evicted", "False", "Admitted", "The workload is admitted again", at)


def _evicted(one: WorkloadRecord) -> None:
    ref = one.ref
    one.on_evicted(
        WorkloadEvicted(source="t", workload=ref, generation=1, reason="Preempted", time=AT)
    )


LATER = AT.replace(hour=3)
Step1 = Callable[[WorkloadRecord], None]  # what happens to every record alike
# (reason, what each record went through before, a's admission, b's, b shares a's dict)
Admission = tuple[str, datetime]  # (ClusterQueue, the pass's moment)
ADMISSIONS: list[tuple[str, list[Step1], Admission, Admission, bool]] = [
    ("fresh records, same queue and moment: one dict", [], ("cq", AT), ("cq", AT), True),
    ("after one shared report: the kept change again", [pending()], ("cq", AT), ("cq", AT), True),
    ("another queue: not a's change (its message)", [], ("cq", AT), ("other", AT), False),
    ("another moment: not a's change (its time)", [], ("cq", AT), ("cq", LATER), False),
    (
        "admitted again after pods ready and an eviction: PodsReady and Evicted turn False",
        [admitted, ready, _evicted],
        ("cq", LATER),
        ("cq", LATER),
        True,  # each one's own dict before (its eviction), then an equal set: kept once
    ),
    (
        "admitted again with QuotaReserved still True: its transition time stays",
        [admitted],
        ("cq", LATER),
        ("cq", LATER),
        True,
    ),
]


@pytest.mark.parametrize(
    ("reason", "before", "a_admission", "b_admission", "shared"),
    ADMISSIONS,
    ids=[c[0] for c in ADMISSIONS],
)
def test_an_admission_sets_what_its_steps_set(
    reason: str,
    before: list[Callable[[WorkloadRecord], None]],
    a_admission: tuple[str, datetime],
    b_admission: tuple[str, datetime],
    shared: bool,
) -> None:
    """on_admitted's change in one step (kept per dict before, queue and moment) is the
    change its conditions made one by one, and is taken again only for the same three."""
    a, b, reference = record("a"), record("b"), record("b")
    for step in before:
        for one in (a, b, reference):
            step(one)
    _admission(a, *a_admission)
    _admission(b, *b_admission)
    _stepwise(reference, *b_admission)
    assert list(b.conditions.items()) == list(reference.conditions.items()), reason
    assert (a.conditions is b.conditions) is shared, reason
    assert render_workload(b, {}) == render_workload(reference, {}), reason
