"""Running a workload's pods as local processes (the local backend's "kubelet").

One process per pod: the pod's first container's ``command`` + ``args`` (the image is
ignored). Each process gets its own session, so stopping it stops whatever it started; it is
stopped with SIGTERM, then SIGKILL after a grace period, as a kubelet would. Output goes to one
log file per pod under the data dir. A workload annotated ``berth.dev/simulated-runtime``
runs no process at all and "finishes" after that time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.logging import get_logger

__all__ = ["PodOutcome", "PodProcess", "RunningPods", "pod_commands"]

log = get_logger("watcher.processes")

# `python` in a workload's command means Berth's own interpreter, so a task written for a
# cluster image (seed 001's `python -c ...`) runs on a machine that only has `python3`.
_PATH = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def pod_commands(pod_spec: dict[str, Any]) -> tuple[list[str], dict[str, str], str | None]:
    """The argv, extra environment and working dir of a pod's first container."""
    containers = pod_spec.get("containers") or []
    container = containers[0] if containers else {}
    argv = [str(part) for part in (container.get("command") or [])]
    argv += [str(part) for part in (container.get("args") or [])]
    env = {
        str(item["name"]): str(item.get("value", ""))
        for item in container.get("env") or []
        if isinstance(item, dict) and "name" in item
    }
    return argv, env, container.get("workingDir")


@dataclass
class PodOutcome:
    pod: str
    exit_code: int


@dataclass
class PodProcess:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path


@dataclass
class RunningPods:
    """The processes of one admitted generation of one workload."""

    generation: int
    pods: list[PodProcess] = field(default_factory=list)
    stopping: bool = False

    @property
    def pids(self) -> list[int]:
        return [pod.process.pid for pod in self.pods]

    @classmethod
    async def start(
        cls,
        *,
        generation: int,
        pods: list[tuple[str, list[str], dict[str, str], str | None]],
        log_dir: Path,
    ) -> RunningPods:
        """Start every pod's process; if one cannot start, the ones started are stopped."""
        # Local file operations take microseconds; a thread hop would cost more than it saves.
        log_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
        running = cls(generation=generation)
        try:
            for name, argv, env, cwd in pods:
                log_path = log_dir / f"{generation}-{name}.log"
                with open(log_path, "ab") as output:  # noqa: ASYNC230
                    process = await asyncio.create_subprocess_exec(
                        *argv,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=output,
                        stderr=asyncio.subprocess.STDOUT,
                        env={**os.environ, "PATH": _PATH, **env},
                        cwd=cwd,
                        start_new_session=True,
                    )
                running.pods.append(PodProcess(name=name, process=process, log_path=log_path))
        except OSError:
            await running.stop(grace=0)
            raise
        return running

    async def wait(self) -> list[PodOutcome]:
        """Wait for every pod to exit; returns their exit codes in pod order."""
        codes = await asyncio.gather(*(pod.process.wait() for pod in self.pods))
        return [PodOutcome(pod.name, code) for pod, code in zip(self.pods, codes, strict=True)]

    async def stop(self, *, grace: float) -> None:
        """SIGTERM every pod's process group, then SIGKILL what is left after ``grace``."""
        self.stopping = True
        alive = [pod for pod in self.pods if pod.process.returncode is None]
        for pod in alive:
            _signal_group(pod.process.pid, signal.SIGTERM)
        if not alive:
            return
        waits = [asyncio.ensure_future(pod.process.wait()) for pod in alive]
        _, pending = await asyncio.wait(waits, timeout=grace)
        for pod in alive:
            if pod.process.returncode is None:
                _signal_group(pod.process.pid, signal.SIGKILL)
        if pending:
            await asyncio.gather(*pending)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass
    except PermissionError:  # pragma: no cover - only if the pid was reused by another user
        log.warning("signal_refused", pid=pid, signal=signum.name)


def kill_leftover(pids: list[int]) -> None:
    """Stop process groups a previous watcher left behind (after a crash)."""
    for pid in pids:
        _signal_group(pid, signal.SIGKILL)
