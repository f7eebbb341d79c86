"""The ageing boost: how a preempted managed job moves forward the longer it waits.

``boost = min(maxBoost, floor(priorityPerMinute x minutes since first preempted))``; the clock
starts at the job's first preemption and is never reset. After ``reserveAfter`` the job also
holds a reservation in its ClusterQueue. docs/ageing.md states the bound this gives.
"""

from __future__ import annotations

from shared.config import AgeingPolicy
from shared.durations import parse_duration

__all__ = ["boost_at"]


def boost_at(policy: AgeingPolicy, waited_seconds: float) -> tuple[int, bool]:
    """(boost, reserved) after ``waited_seconds`` since the first preemption."""
    waited = max(0.0, waited_seconds)
    # Integer arithmetic on milliseconds: the boost is exact and never depends on a float.
    boost = policy.priority_per_minute * int(waited * 1000) // 60_000
    if policy.max_boost is not None:
        boost = min(boost, policy.max_boost)
    reserved = policy.reserve_after is not None and waited >= parse_duration(policy.reserve_after)
    return boost, reserved
