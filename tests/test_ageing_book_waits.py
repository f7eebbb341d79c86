"""services/admission/bounds.py AgeingBook.waiting_since: a workload's current wait began at its
last eviction, else at its queue time (its creation until it is first evicted)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.admission.bounds import AgeingBook
from services.admission.model import WorkloadView
from shared.events import (
    AnyEvent,
    PodSet,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
)

REF = WorkloadRef("team-a", "job", "uid-1")
CREATED = 1_700_000_000.0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def submitted() -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="watcher",
        workload=REF,
        kind="Job",
        queue_name="lq",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=at(CREATED),
        time=at(CREATED + 1),
    )


def evicted(seconds: float) -> WorkloadEvicted:
    return WorkloadEvicted(
        source="watcher", workload=REF, generation=1, reason="Preempted", time=at(seconds)
    )


def finished(seconds: float) -> WorkloadFinished:
    return WorkloadFinished(
        source="watcher", workload=REF, generation=1, succeeded=True, time=at(seconds)
    )


def view(queue_time: float) -> WorkloadView:
    return WorkloadView(REF, "lq", "cq", 0, 0, "pending", queue_time)


CASES: list[tuple[str, list[AnyEvent], float, float]] = [
    ("never evicted: its queue time, its creation", [submitted()], CREATED, CREATED),
    ("evicted: the eviction", [submitted(), evicted(CREATED + 50)], CREATED, CREATED + 50),
    (
        "evicted twice: the last eviction",
        [submitted(), evicted(CREATED + 50), evicted(CREATED + 90)],
        CREATED,
        CREATED + 90,
    ),
    (
        "an eviction seen before the submit still counts",
        [evicted(CREATED + 50), submitted()],
        CREATED,
        CREATED + 50,
    ),
    (
        "ended: nothing kept, the queue time again",
        [submitted(), evicted(CREATED + 50), finished(CREATED + 60)],
        CREATED,
        CREATED,
    ),
]


@pytest.mark.parametrize(
    ("reason", "events", "queue_time", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_waiting_since(
    reason: str, events: list[AnyEvent], queue_time: float, expected: float
) -> None:
    book = AgeingBook()
    for event in events:
        book.apply(event)
    assert book.waiting_since(view(queue_time)) == expected, reason
