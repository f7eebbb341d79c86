"""Admission's fold clock (services/admission/service.py ``_StoppedClock.advance``): it stops
at each folded event's time and never steps back, within a batch or from one batch to the
next, though the stream is not always in time order (a watcher's announcements sent again
after a failover are stored after later ones: services/watcher/local/backend.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.events import PodSet, WorkloadRef, WorkloadSubmitted
from tests.test_admission_fair_sharing import _afs_service

START = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _submitted(name: str, second: int) -> WorkloadSubmitted:
    at = START + timedelta(seconds=second)
    return WorkloadSubmitted(
        source="watcher",
        workload=WorkloadRef("default", name, f"uid-{name}"),
        kind="Job",
        queue_name="lq-a",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=at,
        time=at,
    )


# (batches folded, each a list of (name, second); second the clock stops at; why)
CASES: list[tuple[list[list[tuple[str, int]]], int, str]] = [
    ([[("a", 1), ("b", 2)]], 2, "in time order: the last event's time"),
    ([[("b", 2), ("a", 1)]], 2, "a piece sent again after a later one, in the same batch"),
    ([[("b", 2)], [("a", 1)]], 2, "the piece sent again folded in the next batch"),
    ([[("a", 1)], [("b", 2)]], 2, "batches in time order"),
]


@pytest.mark.parametrize(("batches", "second", "reason"), CASES, ids=[c[2] for c in CASES])
def test_the_fold_clock_never_steps_back(
    batches: list[list[tuple[str, int]]], second: int, reason: str
) -> None:
    service = _afs_service()
    scheduler = service.scheduler
    submit, seen = scheduler.submit, []

    def submitted_at(entry: Any) -> None:  # the clock as the fold stands at each submission
        seen.append(scheduler.clock())
        submit(entry)

    scheduler.submit = submitted_at  # type: ignore[method-assign,assignment]
    for batch in batches:
        service._apply([_submitted(name, at) for name, at in batch])
    folded = {name for batch in batches for name, _ in batch}
    assert {r.ref.name for r in service.records.values()} == folded, reason
    assert seen == sorted(seen), (reason, seen)
    assert seen[-1] == (START + timedelta(seconds=second)).timestamp(), reason
