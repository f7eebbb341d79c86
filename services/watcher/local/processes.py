"""Running a workload's pods as local processes (the local backend's "kubelet").

One process per pod: the pod's first container's ``command`` + ``args`` (the image is
ignored). Each process gets its own session, so stopping it stops whatever it started; it is
stopped with SIGTERM, then SIGKILL after a grace period, as a kubelet would. Output goes to one
log file per pod under the data dir (:func:`workload_log_dir`: directories 0700, files 0600,
never a path outside it). A workload annotated ``berth.dev/simulated-runtime`` runs no
process at all and "finishes" after that time.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.events import WorkloadRef
from shared.logging import get_logger
from shared.names import name_problem

__all__ = ["PodOutcome", "PodProcess", "RunningPods", "pod_commands", "workload_log_dir"]

log = get_logger("watcher.processes")

# `python` in a workload's command means Berth's own interpreter, so a task written for a
# cluster image (seed 001's `python -c ...`) runs on a machine that only has `python3`.
_PATH = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def workload_environment(own: dict[str, str]) -> dict[str, str]:
    """What a workload's process sees: the machine's environment without Berth's own
    settings (``BERTH_*``: the watcher's credentials among them, which a workload must
    never hold), ``PATH`` with Berth's interpreter first, then the container's ``env``."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    return {**inherited, "PATH": _PATH, **own}


def workload_log_dir(root: Path, namespace: str, name: str) -> Path:
    """Where a workload's pod logs go: ``<root>/<namespace>/<name>``.

    Only for a valid namespace (DNS-1123 label) and name (DNS-1123 subdomain), and the
    resolved path must lie inside the resolved root: nothing derived from a name leaves the
    data dir (a Job named ``/tmp/x`` once wrote its logs to /tmp). Raises ``OSError``
    (EINVAL) otherwise, as a failed ``open`` would.
    """
    problem = name_problem(namespace, "namespace") or name_problem(name, "name")
    if problem is not None:
        raise OSError(errno.EINVAL, f"no log path for {namespace!r}/{name!r}: {problem}")
    base = root.resolve()
    folder = (base / namespace / name).resolve()
    if folder.parent.parent != base:
        raise OSError(errno.EINVAL, f"log path {folder} is not inside {base}")
    return folder


def _private_dirs(log_dir: Path) -> None:
    """Make ``log_dir`` and the two levels above it (namespace, log root) owner-only."""
    log_dir.parent.parent.parent.mkdir(parents=True, exist_ok=True)
    for folder in (log_dir.parent.parent, log_dir.parent, log_dir):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)  # an older Berth made them 0755


def _open_log(path: Path) -> int:
    """Append-only, owner-only, and never through a symlink planted in its place."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


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
    # Its readiness as last seen while reports were off (services/watcher/pods_ready_gate.py).
    unreported_ready: tuple[WorkloadRef, bool] | None = None

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
        _private_dirs(log_dir)
        running = cls(generation=generation)
        try:
            for name, argv, env, cwd in pods:
                log_path = log_dir / f"{generation}-{name}.log"
                with open(_open_log(log_path), "ab") as output:  # noqa: ASYNC230
                    process = await asyncio.create_subprocess_exec(
                        *argv,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=output,
                        stderr=asyncio.subprocess.STDOUT,
                        env=workload_environment(env),
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
