"""`berth up` as a child process, for the tests and benchmarks that drive a live stack.

It starts `berth up` on a free NATS port, reads what it prints until the ready line (the
NATS URL, the CLI's credentials, each component's pid and HTTP address: ``admission``, or
``admission-1`` with replicas, ``nats`` or ``nats-0``... with a cluster), then keeps draining
its output so a chatty supervisor never blocks on a full pipe. ``stop()`` sends SIGTERM, as
Ctrl-C would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["LiveStack", "start_stack"]

_COMPONENT = re.compile(
    r"^((?:watcher|admission|preemption|recovery|nats|console)(?:-\d+)?)\s+(\d+)\s+(\S+)"
)
_READY = re.compile(r"Berth is ready in ([\d.]+)s")


class LiveStack:
    def __init__(
        self,
        data_dir: Path,
        *,
        env: dict[str, str] | None = None,
        replicas: int = 1,
        nats_cluster: int = 1,
    ) -> None:
        self.data_dir = data_dir
        self.output: list[str] = []
        self.url = ""
        self.pids: dict[str, int] = {}
        self.addresses: dict[str, str] = {}
        self.ready_seconds = 0.0
        self.cli_credentials: Path | None = None  # from the `export BERTH_CREDS=` line
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "berth_cli",
                "up",
                "--data-dir",
                str(data_dir),
                "--nats-port",
                "0",
                *(["--replicas", str(replicas)] if replicas != 1 else []),
                *(["--nats-cluster", str(nats_cluster)] if nats_cluster != 1 else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "250", **(env or {})},
        )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("berth up exited:\n" + "".join(self.output))
            self.output.append(line)
            component = _COMPONENT.match(line)
            if component:
                self.pids[component.group(1)] = int(component.group(2))
                self.addresses[component.group(1)] = component.group(3)
            if line.startswith("export BERTH_NATS_URL="):
                self.url = line.split("=", 1)[1].strip()
            if line.startswith("export BERTH_CREDS="):
                self.cli_credentials = Path(line.split("=", 1)[1].strip())
            ready = _READY.search(line)
            if ready:
                self.ready_seconds = float(ready.group(1))
                threading.Thread(target=self._drain, daemon=True).start()
                return
        raise RuntimeError("berth up not ready:\n" + "".join(self.output))

    def credentials(self, user: str) -> Path | None:
        """The seed file of a bus user of this stack (None when the bus is open)."""
        path = self.data_dir / "creds" / f"{user}.nk"
        return path if path.exists() else None

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C would; returns `berth up`'s exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_stack(
    data_dir: Path,
    *,
    env: dict[str, str] | None = None,
    replicas: int = 1,
    nats_cluster: int = 1,
) -> LiveStack:
    """Start `berth up` and wait until it says it is ready."""
    stack = LiveStack(data_dir, env=env, replicas=replicas, nats_cluster=nats_cluster)
    try:
        stack.wait_ready()
    except BaseException:
        stack.stop()
        raise
    return stack
