"""Until when a run may not be a victim (services/preemption/protection.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from services.preemption.protection import (
    HOUR,
    Protection,
    budget_until,
    protected_until,
    recent,
)


@dataclass
class Case:
    why: str
    protection: Protection
    preempted_at: list[float]
    aged: bool
    for_reservation: bool
    until: float  # admitted at 1000, asked at NOW
    last_by_this_preemptor: float | None = None


NOW = 5000.0
CASES: dict[str, Case] = {
    "nothing": Case("No policy: never protected.", Protection(), [], False, False, 1000),
    "minimum_run_time": Case(
        "minimumRunTime protects every run from its admission.",
        Protection(minimum_run_time=60),
        [],
        False,
        False,
        1060,
    ),
    "aged_protect_for": Case(
        "A run ageing brought back is protected for protectFor when that is longer.",
        Protection(minimum_run_time=60, protect_for=120),
        [],
        True,
        False,
        1120,
    ),
    "plain_ignores_protect_for": Case(
        "protectFor is for runs ageing brought back only.",
        Protection(minimum_run_time=60, protect_for=120),
        [],
        False,
        False,
        1060,
    ),
    "budget_used": Case(
        "Preempted maxPreemptionsPerHour times in the hour: shielded until the oldest leaves.",
        Protection(per_hour=2),
        [NOW - 3000, NOW - 100],
        False,
        False,
        NOW - 3000 + HOUR,
    ),
    "budget_window": Case(
        "A preemption older than an hour does not count.",
        Protection(per_hour=2),
        [NOW - HOUR - 1, NOW - 100],
        False,
        False,
        1000,
    ),
    "same_preemptor": Case(
        "A preemptor never evicts the same workload twice within an hour.",
        Protection(),
        [],
        False,
        False,
        NOW - 100 + HOUR,
        last_by_this_preemptor=NOW - 100,
    ),
    "same_preemptor_reservation": Case(
        "A reservation is not held back by an earlier eviction either.",
        Protection(),
        [],
        False,
        True,
        1000,
        last_by_this_preemptor=NOW - 100,
    ),
    "budget_not_against_reservation": Case(
        "A reservation is not held back by the budget, only by the run's protection.",
        Protection(minimum_run_time=60, per_hour=1),
        [NOW - 10],
        False,
        True,
        1060,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str) -> None:
    """Each case is protected until its stated time."""
    case = CASES[name]
    until = protected_until(
        admitted_at=1000.0,
        preempted_at=case.preempted_at,
        protection=case.protection,
        aged=case.aged,
        now=NOW,
        for_reservation=case.for_reservation,
        last_by_this_preemptor=case.last_by_this_preemptor,
    )
    assert until == case.until, case.why


def test_budget_counts_only_the_last_hour() -> None:
    """recent() and budget_until() agree on the window: (now - 1 h, now]."""
    times = [NOW - HOUR, NOW - HOUR + 1, NOW]
    assert recent(times, NOW) == 2
    assert budget_until(times, 3, NOW) == 0.0
    assert budget_until(times, 2, NOW) == NOW - HOUR + 1 + HOUR
    assert budget_until(times, None, NOW) == 0.0
