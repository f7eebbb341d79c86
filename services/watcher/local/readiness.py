"""When the local backend's pods are ready (Kueue's PodsReady, for waitForPodsReady).

A local "pod" is ready once its processes have started and, if a container declares a
``readinessProbe`` with an ``exec`` command, once that command has exited 0, tried every
``periodSeconds`` (Kubernetes' default 10) after ``initialDelaySeconds``. Other probe kinds
(httpGet, tcpSocket, grpc) need a network the local backend does not give its processes;
they count as ready, and :func:`exec_probes` says which were skipped.

A ready run loses readiness (Kueue's PodsReady False, WaitForRecovery; recoveryTimeout counts
from then) when one of its processes exits with failure while others still run
(:func:`first_failure`): as a Job's ready count drops when a pod fails. A process that exits 0
stays counted, as a succeeded pod does. The local backend restarts no process, so such a run
never recovers: it is evicted after recoveryTimeout, or finishes (failed) first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ExecProbe", "exec_probes", "first_failure", "wait_ready"]

DEFAULT_PERIOD_S = 10.0
PROBE_TIMEOUT_S = 1.0  # Kubernetes' default timeoutSeconds


@dataclass(frozen=True, slots=True)
class ExecProbe:
    container: str
    command: list[str]
    initial_delay: float = 0.0
    period: float = DEFAULT_PERIOD_S
    timeout: float = PROBE_TIMEOUT_S


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
