"""Until when a running workload may not be a victim: the anti-thrash rules, one per function.

Pure: times are epoch seconds, policies come in as numbers. The service (and the starvation
simulation) asks ``protected_until`` for each candidate; a candidate protected at the time of
a search is skipped, and the preemptor is looked at again when the protection ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "HOUR",
    "Protection",
    "budget_until",
    "pair_until",
    "protected_until",
    "recent",
    "run_until",
]

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Protection:
    """A ClusterQueue's protections, in seconds (from its ClusterQueuePolicy)."""

    minimum_run_time: float = 0.0  # spec.minimumRunTime
    protect_for: float = 0.0  # spec.ageing.protectFor: for a run ageing brought back
    per_hour: int | None = None  # spec.maxPreemptionsPerHour


def run_until(admitted_at: float, protection: Protection, *, aged: bool) -> float:
    """A run is protected for ``minimumRunTime`` after its admission (Slurm's
    PreemptExemptTime, Volcano's cooldown); a run ageing brought back (the workload has an
    ageing clock) for ``protectFor`` if that is longer, so that coming back is never
    undone at once by the next arrival (the thrash ``bench/ageing.py`` counts)."""
    minimum = protection.minimum_run_time
    if aged:
        minimum = max(minimum, protection.protect_for)
    return admitted_at + minimum


def recent(preempted_at: Sequence[float], now: float) -> int:
    """How often a workload was preempted in the hour before ``now``."""
    return sum(1 for when in preempted_at if now - HOUR < when <= now)


def budget_until(preempted_at: Sequence[float], per_hour: int | None, now: float) -> float:
    """A workload preempted ``maxPreemptionsPerHour`` times within the last hour is not a
    victim of priority preemption until the oldest of those leaves the hour (Kueue issue
    #6861 shows workloads preempted over 100 times): so no workload is preempted by
    priority more than that many times in any hour. 0 when it is not shielded."""
    if per_hour is None:
        return 0.0
    window = sorted(when for when in preempted_at if now - HOUR < when <= now)
    if len(window) < per_hour:
        return 0.0
    return window[len(window) - per_hour] + HOUR


def pair_until(last_by_this_preemptor: float | None) -> float:
    """A preemptor never evicts the same workload twice within an hour: when reservations
    make a high-priority workload wait again, it takes other victims, or waits, rather than
    the one it already cost a run (the ping-pong bench/ageing.py counts as repeated pairs).
    0 when this preemptor never evicted it."""
    return 0.0 if last_by_this_preemptor is None else last_by_this_preemptor + HOUR


def protected_until(
    *,
    admitted_at: float,
    preempted_at: Sequence[float],
    protection: Protection,
    aged: bool,
    now: float,
    for_reservation: bool = False,
    last_by_this_preemptor: float | None = None,
) -> float:
    """When a run stops being protected: its run protection and, against priority
    preemption, its preemption budget and this preemptor's last eviction of it. A
    reservation is held back by neither: the starvation bound needs every run in its way to
    be preemptible once protected, and each of its victims has run at least its minimum run
    time (docs/ageing.md)."""
    until = run_until(admitted_at, protection, aged=aged)
    if not for_reservation:
        until = max(
            until,
            budget_until(preempted_at, protection.per_hour, now),
            pair_until(last_by_this_preemptor),
        )
    return until
