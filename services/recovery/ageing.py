"""The ageing boost: how a preempted managed job moves forward the longer it waits.

``boost = min(maxBoost, floor(priorityPerMinute x minutes since first preempted))``; the clock
starts at the job's first preemption and is never reset. After ``reserveAfter`` the job is
due a reservation in its ClusterQueue, granted while the share rule allows it
(``reservation_granted``). docs/ageing.md states the bound this gives.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from shared.config import AgeingPolicy
from shared.durations import parse_duration
from shared.starvation import fits_share

__all__ = ["boost_at", "reservation_granted", "reserve_after_seconds"]


def boost_at(policy: AgeingPolicy, waited_seconds: float) -> tuple[int, bool]:
    """(boost, due a reservation) after ``waited_seconds`` since the first preemption."""
    waited = max(0.0, waited_seconds)
    # Integer arithmetic on milliseconds: the boost is exact and never depends on a float.
    boost = policy.priority_per_minute * int(waited * 1000) // 60_000
    if policy.max_boost is not None:
        boost = min(boost, policy.max_boost)
    after = policy.reserve_after
    reserved = after is not None and waited >= reserve_after_seconds(after)
    return boost, reserved


@functools.lru_cache(maxsize=256)
def reserve_after_seconds(text: str) -> float:
    """A ``reserveAfter`` in seconds: read once per distinct text (a tick asks for every
    aged workload's, of a handful of policies)."""
    return parse_duration(text)


def reservation_granted(
    policy: AgeingPolicy,
    *,
    request: Mapping[str, int],
    nominal: Mapping[str, int],
    earlier: Iterable[Mapping[str, int]],
) -> bool:
    """A due job holds its reservation only if it fits within ``maxReservedShare`` of its
    ClusterQueue's nominal quota together with every job of that ClusterQueue that started
    ageing before it and has not ended.

    Why the earlier ones count, running or not: they go first, so a later job can never
    take share an earlier one will need, and since they only leave, a grant once made holds.
    Reservations granted this way never hold more than the share together (the latest one
    counted all the others), so higher classes always keep the rest (docs/ageing.md).
    """
    return fits_share(policy.max_reserved_share, nominal, [request, *earlier])
