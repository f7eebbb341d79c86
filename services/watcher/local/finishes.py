"""Reporting the local backend's finished runs: ``WorkloadFinished`` and the terminal status.

A finish is two writes: the report (it frees the quota) and the status record, in that
order, the second only once the first is stored (:meth:`Finishes.send`), marked
``reported``: the mark means the report is on the stream. A terminal status without it is
reported again when a watcher starts (:func:`unreported_finish`). Simulated runs whose time
is up are reported in pipelined rounds, many at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from services.watcher import metrics, reporting
from services.watcher.local.processes import RunningPods
from services.watcher.local.simulated import Simulated
from services.watcher.local.statuses import StatusStore
from shared.bus import SentEvents
from shared.events import Event, WorkloadRef, now
from shared.logging import get_logger
from shared.service import Runtime

__all__ = [
    "FINISH_ROUNDS_IN_FLIGHT",
    "TERMINAL_PHASES",
    "Finish",
    "Finishes",
    "phase_of",
    "unreported_finish",
]

log = get_logger("watcher.local")

# Rounds of simulated finishes sent and not yet acked; past this the finisher waits.
FINISH_ROUNDS_IN_FLIGHT = 8

Finish = tuple[str, WorkloadRef, int, int, str]  # key, workload, generation, exit code, message

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def phase_of(exit_code: int) -> str:
    return "Succeeded" if exit_code == 0 else "Failed"


def unreported_finish(status: dict[str, Any]) -> bool:
    """A status record whose finish may never have reached the stream: terminal (Succeeded
    or Failed) without ``reported: true``. The mark is written with the terminal status
    only after the ``WorkloadFinished`` report was stored, so a status without it was
    written by a watcher before that order (issue 15: killed between a status write that
    landed and a report that did not, its Job held quota for good). Such a finish is
    reported again at start: facts carry ids, and every consumer ignores a second finish of
    a generation, so a report twice is harmless; never is not."""
    return status.get("phase") in TERMINAL_PHASES and status.get("reported") is not True


def _terminal_status(generation: int, code: int, message: str) -> dict[str, Any]:
    """What a reported finish leaves in the status bucket."""
    return {
        "phase": phase_of(code),
        "generation": generation,
        "exitCode": code,
        "message": message,
        "pids": [],
        "reported": True,
    }


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
        """Send finished runs' reports (they free the quota); returns what awaits their acks
        and only then writes the terminal statuses, marked ``reported``.

        Why this order (issue 15): a terminal status stored before its report left, after a
        kill in between, a Job that every later watcher took for reported, and its quota was
        held forever. Now a kill before the status write leaves the run Running in the
        bucket: the next watcher reports it evicted by the restart, which every consumer
        ignores for a generation that finished."""
        for _, ref, _, _, _ in finishes:
            self.running.pop(ref.uid, None)
        at = now()  # the round's reports share their moment (reporting.py)
        reported = await self.runtime.bus.send_many(
            [
                reporting.finished(
                    ref, gen, succeeded=code == 0, exit_code=code, message=text, at=at
                )
                for _, ref, gen, code, text in finishes
            ]
        )
        return self._settle(finishes, reported)

    async def _settle(self, finishes: list[Finish], reported: SentEvents) -> None:
        await reported.settle()
        writes = await self.store.send(
            [(key, _terminal_status(gen, code, text)) for key, _, gen, code, text in finishes]
        )
        await self.store.settle(writes)
        phases = [phase_of(code) for _, _, _, code, _ in finishes]
        for phase, count in Counter(phases).items():
            metrics.FINISHED.labels(result=phase).inc(count)
        info = log.info  # the logger's lookup once per round, not per line
        for (_, ref, gen, code, _), phase in zip(finishes, phases, strict=True):
            info("workload_finished", workload=ref.key, phase=phase, exit_code=code, generation=gen)

    async def report_again(self, left: list[tuple[str, dict[str, Any]]]) -> None:
        """At start: report the finishes of these objects (key, object) whose terminal
        status is not marked reported (:func:`unreported_finish`), all in one pipelined
        round, then mark their statuses."""
        if not left:
            return
        reports: list[Event] = []
        marks: list[tuple[str, dict[str, Any]]] = []
        for key, obj in left:
            status = self.store.of(key, obj)
            generation = int(status.get("generation", 0))
            code = status.get("exitCode")
            code = code if isinstance(code, int) and not isinstance(code, bool) else None
            message = str(status.get("message") or "")
            succeeded = status.get("phase") == "Succeeded"
            ref = reporting.ref_of(obj)
            reports.append(
                reporting.finished(
                    ref, generation, succeeded=succeeded, exit_code=code, message=message
                )
            )
            marks.append((key, {"reported": True}))
            log.info(
                "finish_reported_again",
                workload=ref.key,
                queue=_queue_of(obj),
                generation=generation,
                phase=status.get("phase"),
                reason="terminal status without a stored report (a watcher killed in between)",
            )
        await self.runtime.bus.publish_many(reports)
        await self.store.settle(await self.store.send(marks))


def _queue_of(obj: dict[str, Any]) -> str:
    labels = obj["metadata"].get("labels") or {}
    return str(labels.get("kueue.x-k8s.io/queue-name") or "")
