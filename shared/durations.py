"""Durations as people write them in YAML: "200ms", "1.5s", "2m", "1h", "30" (seconds)."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


def parse_duration(text: str) -> float:
    """The duration in seconds; raises ValueError naming the text if it is not one."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r} (use e.g. 200ms, 1.5s, 2m, 1h)")
    return float(match.group(1)) * _UNIT_MS[match.group(2)] / 1000
