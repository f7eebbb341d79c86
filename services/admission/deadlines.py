"""Deadline order: ``Configuration.spec.admission.waitTargets``.

Each target says how soon after creation workloads of at least some priority should be
admitted. A pending workload's deadline is its queue time plus the target of the highest
floor its priority reaches (the target without a floor, if none does); the queue then runs
earliest deadline first. Every deadline is finite once a target has no floor, so nothing
waits forever behind a stream of higher priorities, and each class's wait is bounded by its
target plus how far the load exceeds the quota.

A workload that no target covers gets no deadline: it queues after every covered one, in
Kueue's priority order. Without targets every deadline is 0 and the order is Kueue's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from shared.config import WaitTarget
from shared.durations import parse_duration

__all__ = ["WaitTargets"]


class WaitTargets:
    def __init__(self, targets: Iterable[WaitTarget] = ()) -> None:
        self._floors: list[tuple[int, float]] = []  # (min priority, wait), highest floor first
        self._default = math.inf  # the target without a floor
        self.enabled = False
        for target in targets:
            self.enabled = True
            if target.min_priority is None:
                self._default = parse_duration(target.wait)
            else:
                self._floors.append((target.min_priority, parse_duration(target.wait)))
        self._floors.sort(reverse=True)

    def deadline(self, priority: int, queue_time: float) -> float:
        """When a workload of ``priority`` queued at ``queue_time`` is due (0 when off)."""
        if not self.enabled:
            return 0.0
        for floor, wait in self._floors:
            if priority >= floor:
                return queue_time + wait
        return queue_time + self._default
