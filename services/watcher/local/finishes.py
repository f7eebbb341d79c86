"""Reporting the local backend's finished runs: ``WorkloadFinished`` and the terminal status.

A finish is two writes: the report (it frees the quota) and the status record. Simulated
runs whose time is up are reported in pipelined rounds, many at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from services.watcher import metrics, reporting
from services.watcher.local.processes import RunningPods
from services.watcher.local.simulated import Simulated
from services.watcher.local.statuses import StatusStore, StatusWrites
from shared.bus import SentEvents
from shared.events import WorkloadRef
from shared.logging import get_logger
from shared.service import Runtime

__all__ = ["FINISH_ROUNDS_IN_FLIGHT", "Finish", "Finishes", "phase_of"]

log = get_logger("watcher.local")

# Rounds of simulated finishes sent and not yet acked; past this the finisher waits.
FINISH_ROUNDS_IN_FLIGHT = 8

Finish = tuple[str, WorkloadRef, int, int, str]  # key, workload, generation, exit code, message


def phase_of(exit_code: int) -> str:
    return "Succeeded" if exit_code == 0 else "Failed"


class Finishes:
    """Reports finished runs. ``running`` is the backend's map of uid -> what runs: a run
    leaves it as its finish is sent (so neither an eviction nor a second finish reports it)."""

    def __init__(
        self,
        runtime: Runtime,
        store: StatusStore,
        running: dict[str, RunningPods | Simulated],
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.running = running
        self.finishing: list[Simulated] = []  # simulated runs whose time is up, unreported
        self.wanted = asyncio.Event()
        self.closing = False  # set on shutdown: the finisher reports what is due, then ends

    def queue(self, run: Simulated) -> None:
        """A simulated run's time is up (and its start was announced): report it soon."""
        if not run.stopping and self.running.get(run.ref.uid) is run:
            self.finishing.append(run)
            self.wanted.set()

    def close(self) -> None:
        """Shutting down: the finisher reports what is due, then ends."""
        self.closing = True
        self.wanted.set()

    async def report_simulated(self) -> None:
        """Report the simulated runs whose time is up, all that are due in one pipelined
        round of Finished reports and one of status writes. The next round goes out without
        waiting for the acks of the last (up to ``FINISH_ROUNDS_IN_FLIGHT``): a finish that
        fell due meanwhile would otherwise hold its quota a round trip longer."""
        settling: set[asyncio.Task[None]] = set()
        while not self.closing or self.finishing:
            await self.wanted.wait()
            self.wanted.clear()
            due, self.finishing = self.finishing, []
            done = [run for run in due if self.running.get(run.ref.uid) is run]
            if not done:
                continue
            while len(settling) >= FINISH_ROUNDS_IN_FLIGHT:
                await asyncio.wait(settling, return_when=asyncio.FIRST_COMPLETED)
            sent = await self.send([(r.key, r.ref, r.generation, 0, "") for r in done])
            # Owned by the runtime: a failed round stops the service, as it always did.
            task = self.runtime.spawn(sent, name="watcher.finish-round")
            settling.add(task)
            task.add_done_callback(settling.discard)
        if settling:
            await asyncio.wait(settling)

    async def finish(
        self, key: str, ref: WorkloadRef, generation: int, code: int, message: str
    ) -> None:
        await (await self.send([(key, ref, generation, code, message)]))

    async def send(self, finishes: list[Finish]) -> Coroutine[Any, Any, None]:
        """Send finished runs' reports first (they free the quota), their statuses right
        behind them, one round trip for all; returns what awaits the acks. Should we die
        between the two, the next watcher reports the run as evicted by the restart; every
        consumer ignores an eviction of a generation that has finished."""
        for _, ref, _, _, _ in finishes:
            self.running.pop(ref.uid, None)
        reported = await self.runtime.bus.send_many(
            [
                reporting.finished(ref, gen, succeeded=code == 0, exit_code=code, message=text)
                for _, ref, gen, code, text in finishes
            ]
        )
        writes = await self.store.send(
            [
                (key, {"phase": phase_of(code), "generation": gen, "exitCode": code, "pids": []})
                for key, _, gen, code, _ in finishes
            ]
        )
        return self._settle(finishes, reported, writes)

    async def _settle(
        self, finishes: list[Finish], reported: SentEvents, writes: StatusWrites
    ) -> None:
        await reported.settle()
        await self.store.settle(writes)
        for _, ref, gen, code, _ in finishes:
            metrics.FINISHED.labels(result=phase_of(code)).inc()
            log.info(
                "workload_finished",
                workload=ref.key,
                phase=phase_of(code),
                exit_code=code,
                generation=gen,
            )
