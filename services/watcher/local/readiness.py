"""When the local backend's pods are ready (Kueue's PodsReady, for waitForPodsReady).

A local "pod" is ready once its processes have started and, if a container declares a
``readinessProbe`` with an ``exec`` command, once that command has exited 0, tried every
``periodSeconds`` (Kubernetes' default 10) after ``initialDelaySeconds``. Other probe kinds
(httpGet, tcpSocket, grpc) need a network the local backend does not give its processes;
they count as ready, and :func:`exec_probes` says which were skipped.

A ready run loses readiness (Kueue's PodsReady False, WaitForRecovery; recoveryTimeout counts
from then) when one of its processes exits with failure while others still run
(:func:`first_failure`), as a Job's ready count drops when a pod fails; a process that exits 0
stays counted, as a succeeded pod does. The local backend restarts no process, so such a run
never recovers: it is evicted after recoveryTimeout, or finishes (failed) first. Its exec
probes keep running once it is ready, as a kubelet's do: ``failureThreshold`` (default 3)
failures in a row of one of them is a loss too, and ``successThreshold`` (default 1) passes
in a row of every one a recovery (:func:`readiness_changes`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["ExecProbe", "exec_probes", "first_failure", "readiness_changes", "wait_ready"]

DEFAULT_PERIOD_S = 10.0
PROBE_TIMEOUT_S = 1.0  # Kubernetes' default timeoutSeconds


@dataclass(frozen=True, slots=True)
class ExecProbe:
    container: str
    command: list[str]
    initial_delay: float = 0.0
    period: float = DEFAULT_PERIOD_S
    timeout: float = PROBE_TIMEOUT_S
    failure_threshold: int = 3  # Kubernetes' defaults
    success_threshold: int = 1


def exec_probes(pod_specs: Mapping[str, dict[str, Any]]) -> tuple[list[ExecProbe], list[str]]:
    """The exec readiness probes of every container of the pod specs, and the containers
    whose probe is of a kind the local backend cannot run (treated as ready)."""
    probes: list[ExecProbe] = []
    skipped: list[str] = []
    for pod_spec in pod_specs.values():
        for container in pod_spec.get("containers") or []:
            probe = container.get("readinessProbe")
            if not isinstance(probe, dict):
                continue
            name = str(container.get("name", ""))
            command = (probe.get("exec") or {}).get("command")
            if not isinstance(command, list) or not command:
                skipped.append(name)
                continue
            probes.append(
                ExecProbe(
                    container=name,
                    command=[str(part) for part in command],
                    initial_delay=float(probe.get("initialDelaySeconds") or 0),
                    period=float(probe.get("periodSeconds") or DEFAULT_PERIOD_S),
                    timeout=float(probe.get("timeoutSeconds") or PROBE_TIMEOUT_S),
                    failure_threshold=int(probe.get("failureThreshold") or 3),
                    success_threshold=int(probe.get("successThreshold") or 1),
                )
            )
    return probes, skipped


async def _succeeds(probe: ExecProbe) -> bool:
    try:
        process = await asyncio.create_subprocess_exec(
            *probe.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return False  # a missing command fails the probe, as in a container
    try:
        return await asyncio.wait_for(process.wait(), probe.timeout) == 0
    except TimeoutError:
        process.kill()
        await process.wait()
        return False


async def wait_ready(probes: list[ExecProbe], *, running: Callable[[], bool]) -> bool:
    """Wait until every probe has succeeded once; False if the run stopped first
    (``running`` turned false), so that a stopped run is never reported ready."""
    for probe in probes:
        await asyncio.sleep(probe.initial_delay)
        while running():
            if await _succeeds(probe):
                break
            await asyncio.sleep(probe.period)
        else:
            return False
    return running()


async def first_failure(
    processes: list[tuple[str, asyncio.subprocess.Process]], *, running: Callable[[], bool]
) -> tuple[str, int] | None:
    """Wait until a process exits with failure while the run goes on (``running`` still
    true, another process still alive): its pod's name and exit code. None when the run
    ends first: every process exited (a finish), or the run was stopped (an eviction's
    SIGTERM is not a failure)."""
    waits = {asyncio.ensure_future(process.wait()): name for name, process in processes}
    try:
        pending = set(waits)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            failed = [(waits[task], task.result()) for task in done if task.result() != 0]
            if failed and pending and running():
                return min(failed)
        return None
    finally:
        for task in waits:
            task.cancel()


async def _probes_turn(probes: list[ExecProbe], *, ready: bool, running: Callable[[], bool]) -> str:
    """Run the probes every (shortest) period until the run's readiness turns: from ready,
    a probe failing ``failure_threshold`` times in a row; from not ready, every probe passing
    ``success_threshold`` times in a row. Returns why; waits for good if there is no probe."""
    if not probes:
        await _until_cancelled()  # nothing to probe
    period = min(probe.period for probe in probes)
    streaks = dict.fromkeys(range(len(probes)), 0)  # consecutive results against `ready`
    while running():
        await asyncio.sleep(period)
        for index, probe in enumerate(probes):
            passed = await _succeeds(probe)
            streaks[index] = streaks[index] + 1 if passed != ready else 0
            if ready and streaks[index] >= probe.failure_threshold:
                return f"readiness probe of {probe.container} failed {streaks[index]} times"
        if not ready and all(
            streaks[i] >= probe.success_threshold for i, probe in enumerate(probes)
        ):
            return "every readiness probe passes again"
    await _until_cancelled()  # the run ended: the process watch ends this


async def _until_cancelled() -> NoReturn:
    """Wait for the owner's cancellation, and nothing else."""
    await asyncio.Event().wait()
    raise AssertionError("an event nobody sets was set")


async def readiness_changes(
    processes: list[tuple[str, asyncio.subprocess.Process]],
    probes: list[ExecProbe],
    *,
    running: Callable[[], bool],
) -> AsyncGenerator[tuple[bool, str], None]:
    """After a run was first reported ready: each change of its readiness, (ready, why),
    until the run ends. A process that fails while others run is a loss for good (nothing is
    restarted); a probe's failures a loss its passes end (see the module docstring)."""
    failure = asyncio.ensure_future(first_failure(processes, running=running))
    ready = True
    try:
        while True:
            turn = asyncio.ensure_future(_probes_turn(probes, ready=ready, running=running))
            try:
                await asyncio.wait({failure, turn}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                turn.cancel()
            if failure.done():
                failed = failure.result()
                if failed is not None and ready:
                    yield False, f"pod {failed[0]} exited with code {failed[1]} while others run"
                return
            ready = not ready
            yield ready, turn.result()
    finally:
        failure.cancel()
