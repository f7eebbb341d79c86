"""maximumExecutionTimeSeconds (services/admission/exec_time.py): time admitted is summed over
admissions, and a workload past its limit is reported once."""

from __future__ import annotations

import pytest

from services.admission.exec_time import MAX_EXEC_TIME_ANNOTATION, ExecutionLimits

# (reason, annotation, [(event, time)], now, due?)
CASES: list[tuple[str, str, list[tuple[str, float]], float, bool]] = [
    ("within the limit", "10", [("admitted", 0.0)], 9.0, False),
    ("at the limit", "10", [("admitted", 0.0)], 10.0, True),
    (
        "earlier runs count: 6 s, evicted, then 4 s more",
        "10",
        [("admitted", 0.0), ("stopped", 6.0), ("admitted", 100.0)],
        104.0,
        True,
    ),
    ("not running: no clock", "10", [("admitted", 0.0), ("stopped", 6.0)], 100.0, False),
    ("no limit", "", [("admitted", 0.0)], 1e9, False),
    ("not a whole number: no limit", "1.5", [("admitted", 0.0)], 1e9, False),
]


@pytest.mark.parametrize(
    ("reason", "annotation", "steps", "now", "due"), CASES, ids=[c[0] for c in CASES]
)
def test_due(
    reason: str, annotation: str, steps: list[tuple[str, float]], now: float, due: bool
) -> None:
    """Whether the workload is past its limit at ``now`` (see the id)."""
    limits = ExecutionLimits()
    limits.submitted("u", {MAX_EXEC_TIME_ANNOTATION: annotation} if annotation else {})
    for step, at in steps:
        getattr(limits, step)("u", at)
    assert limits.due(now) == (["u"] if due else []), reason
    if due:
        assert limits.due(now + 1) == [], "reported once"
