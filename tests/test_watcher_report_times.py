"""The time of the watcher's reports (services/watcher/reporting.py): a round's moment when
one is given (``at``: read once for the reports a round makes together), else the clock read
for the event; nothing else of the report depends on it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from bench.objects import simulated_job
from services.watcher import reporting
from shared.events import Event, WorkloadRef
from shared.workloads import workload_spec

REF = WorkloadRef("team", "job", "uid-1")
OBJ = simulated_job("job", "team", 1000, uid="uid-1")
ROUND = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

# (why, the report built with the given moment or none)
BUILDERS: list[tuple[str, Callable[[datetime | None], Event]]] = [
    ("submitted", lambda at: reporting.submitted(OBJ, workload_spec(OBJ), at=at)),
    ("started", lambda at: reporting.started(REF, 2, at=at)),
    ("first pods ready", lambda at: reporting.pods_ready(REF, 2, at=at)),
    (
        "a later readiness loss",
        lambda at: reporting.pods_ready(REF, 2, ready=False, first=False, at=at),
    ),
    ("finished", lambda at: reporting.finished(REF, 2, succeeded=True, exit_code=0, at=at)),
]


@pytest.mark.parametrize("case", BUILDERS, ids=[case[0] for case in BUILDERS])
def test_a_report_takes_the_rounds_moment_or_reads_the_clock(
    case: tuple[str, Callable[[datetime | None], Event]],
) -> None:
    _, build = case
    given = build(ROUND)
    assert given.time == ROUND, "the round's moment, as given"
    before = datetime.now(UTC)
    own = build(None)
    after = datetime.now(UTC)
    assert before <= own.time <= after, "no moment given: the clock is read (must not reuse)"
    assert own.time != ROUND
    # Everything else is the same report (a later readiness loss has an id of its own).
    same = ("id", "source", "workload", "term")
    for field in same if own.id == given.id else same[1:]:
        assert getattr(own, field) == getattr(given, field), field
