"""A simulated run: a workload that runs no process (``berth.dev/simulated-runtime``)."""

from __future__ import annotations

import asyncio

from shared.events import WorkloadRef

__all__ = ["Simulated"]


class Simulated:
    """A workload that runs no process and finishes after its simulated runtime: a timer,
    not a task (a burst of thousands costs thousands of timers and nothing else)."""

    def __init__(self, key: str, ref: WorkloadRef, generation: int) -> None:
        self.key = key
        self.ref = ref
        self.generation = generation
        self.stopping = False
        # The finish is reported only after Running is written and Started published.
        self.announced = False
        self.elapsed = False
        self.timer: asyncio.TimerHandle | None = None
