"""kubectl's short age, one function for the CLI's AGE column and the console's
(shared/durations.py ``short_age``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from berth_cli.get import age, due
from shared.durations import short_age

# (seconds, shown, why)
AGES = [
    (0, "0s", "just now"),
    (119.9, "119s", "seconds below two minutes, whole ones"),
    (120, "2m", "minutes from two minutes"),
    (2 * 3600 - 1, "119m", "minutes below two hours"),
    (2 * 3600, "2h", "hours from two hours"),
    (2 * 86400, "2d", "days from two days"),
    (-5, "0s", "a clock a little ahead is not a negative age"),
]


@pytest.mark.parametrize(("seconds", "shown", "why"), AGES, ids=[a[2] for a in AGES])
def test_short_age(seconds: float, shown: str, why: str) -> None:
    assert short_age(seconds) == shown, why


def test_the_cli_shows_ages_and_deadlines_with_it() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    stamp = (now - timedelta(minutes=5)).isoformat()
    assert age(stamp, now=now) == "5m"
    assert due(stamp, now=now) == "5m late"
    assert due((now + timedelta(hours=3)).isoformat(), now=now) == "in 3h"
