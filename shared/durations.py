"""Time as text: durations as people write them in YAML ("200ms", "1.5s", "2m", "1h", "30"
for seconds), timestamps as Kubernetes writes them (RFC 3339, whole seconds, UTC), and the
ages and durations SkyPilot's job table and kubectl show (the CLI's and the console's alike)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["ago", "kube_timestamp", "parse_duration", "run_time", "short_age"]


def kube_timestamp(when: datetime | float) -> str:
    """``2026-11-24T02:30:00Z`` for a datetime or epoch seconds (metav1.Time's format)."""
    if not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, UTC)
    elif when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


def parse_duration(text: str) -> float:
    """The duration in seconds; raises ValueError naming the text if it is not one."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r} (use e.g. 200ms, 1.5s, 2m, 1h)")
    return float(match.group(1)) * _UNIT_MS[match.group(2)] / 1000


def ago(seconds: float) -> str:
    """SkyPilot's SUBMITTED column: ``5 secs ago``, ``3 mins ago``, ``2 hrs ago``."""
    if seconds < 60:
        return f"{max(int(seconds), 0)} secs ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} mins ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} hrs ago"
    return f"{int(seconds // 86400)} days ago"


def short_age(seconds: float) -> str:
    """kubectl's short age: ``45s``, ``5m``, ``3h``, ``2d`` (a negative one is ``0s``)."""
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600 * 2:
        return f"{seconds // 60}m"
    if seconds < 86400 * 2:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def run_time(seconds: float) -> str:
    """SkyPilot's durations: ``42s``, ``3m 5s``, ``1h 2m 3s``."""
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
