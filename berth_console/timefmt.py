"""Times as the console shows them: ages like kubectl's, SkyPilot's "secs ago" and durations."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from berth_console.markup import Markup, render
from shared.durations import ago, short_age
from shared.durations import run_time as duration

__all__ = ["ago", "clock", "duration", "seconds_since", "short_age", "time_tag"]


def clock(when: datetime | float) -> str:
    """The time of day in UTC, to the second (event lines, timelines)."""
    if not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, UTC)
    return when.astimezone(UTC).strftime("%H:%M:%S")


def time_tag(when: datetime | float, text: str | None = None) -> Markup:
    """A ``<time>`` element with the machine-readable instant and a readable label."""
    if not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, UTC)
    instant = when.astimezone(UTC)
    return render(
        '<time datetime="$iso" title="$full">$text</time>',
        iso=instant.isoformat(timespec="seconds").replace("+00:00", "Z"),
        full=instant.strftime("%Y-%m-%d %H:%M:%S UTC"),
        text=text if text is not None else clock(instant),
    )


def seconds_since(when: datetime | float | None, *, now: float | None = None) -> float:
    """Seconds from ``when`` until now (0 for None)."""
    if when is None:
        return 0.0
    stamp = when.timestamp() if isinstance(when, datetime) else when
    return (time.time() if now is None else now) - stamp
