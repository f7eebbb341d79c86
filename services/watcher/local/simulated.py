"""A simulated run: a workload that runs no process (``berth.dev/simulated-runtime``), and the
clocks that end such runs (:class:`Clocks`)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from shared.events import WorkloadRef

__all__ = ["Clocks", "Simulated", "due_at"]


class Simulated:
    """A workload that runs no process and finishes after its simulated runtime: a timer,
    not a task (:class:`Clocks`: a burst of thousands costs a few timers and nothing else)."""

    def __init__(self, key: str, ref: WorkloadRef, generation: int) -> None:
        self.key = key
        self.ref = ref
        self.generation = generation
        self.stopping = False  # evicted, deleted or shut down: its clock ends it no more
        # The finish is reported only after Running is written and Started published.
        self.announced = False
        self.elapsed = False


def due_at(now: float, seconds: float) -> float:
    """When a simulated run started at ``now`` (event-loop time) for ``seconds`` ends: then,
    rounded up to the next whole millisecond. Why rounded: the runs a round of admissions
    starts with one runtime end at the same millisecond and share one timer (one timer per run
    cost each run a heap push, a pop and a callback in the event loop); never early, at most
    1 ms late."""
    return math.ceil((now + seconds) * 1000) / 1000


class Clocks:
    """The clocks of simulated runs: one event-loop timer per millisecond at which some run
    ends; ``elapsed`` is called for each run whose time is up, in the order they started,
    unless it is ``stopping`` by then (a stopped run is not cancelled one by one: its timer
    may be shared, so it is skipped when it fires)."""

    def __init__(self, elapsed: Callable[[Simulated], None]) -> None:
        self.elapsed = elapsed
        self.due: dict[float, list[Simulated]] = {}  # due_at -> runs ending then

    def start(self, run: Simulated, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        when = due_at(loop.time(), seconds)
        runs = self.due.get(when)
        if runs is None:
            runs = self.due[when] = []
            loop.call_at(when, self._ring, when)
        runs.append(run)

    def _ring(self, when: float) -> None:
        for run in self.due.pop(when, ()):
            if not run.stopping:
                self.elapsed(run)
