"""Fixtures with real parts: a real nats-server on loopback, real service processes.

The nats-server fixture is synchronous (no event-loop scope trouble with pytest-asyncio 1.x)
and each test gets its own server with its own store, so no test sees another's events; a
server starts in ~20 ms.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.natsserver import NatsServer

REPO = Path(__file__).resolve().parent.parent
SEEDS = REPO.parent / "shared" / "seeds"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(store_dir=tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


def berth(
    *args: str, url: str, check: bool = True, stdin: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run the real `berth` CLI in a subprocess, as a user would."""
    result = subprocess.run(
        [sys.executable, "-m", "berth_cli", *args],
        env={**os.environ, "BERTH_NATS_URL": url},
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        cwd=REPO,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"berth {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


class Stack:
    """`berth up` running in a subprocess, with what it printed."""

    def __init__(self, process: subprocess.Popen[str], data_dir: Path) -> None:
        self.process = process
        self.data_dir = data_dir
        self.output: list[str] = []
        self.url = ""
        self.pids: dict[str, int] = {}
        self.ready_seconds = 0.0

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError("berth up exited:\n" + "".join(self.output))
            self.output.append(line)
            match = re.match(r"^(watcher|admission|preemption|recovery|nats)\s+(\d+)\s", line)
            if match:
                self.pids[match.group(1)] = int(match.group(2))
            if line.startswith("export BERTH_NATS_URL="):
                self.url = line.split("=", 1)[1].strip()
            ready = re.search(r"Berth is ready in ([\d.]+)s", line)
            if ready:
                self.ready_seconds = float(ready.group(1))
                return
        raise AssertionError("berth up not ready:\n" + "".join(self.output))

    def log(self, service: str) -> str:
        return (self.data_dir / "logs" / f"{service}.log").read_text()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_stack(data_dir: Path) -> Stack:
    """Start `berth up` on a free NATS port and wait until it says it is ready."""
    process = subprocess.Popen(
        [sys.executable, "-m", "berth_cli", "up", "--data-dir", str(data_dir), "--nats-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "250", "BERTH_POD_GRACE_SECONDS": "2"},
    )
    running = Stack(process, data_dir)
    try:
        running.wait_ready()
    except BaseException:
        running.stop()
        raise
    return running


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    running = start_stack(tmp_path / "berth")
    try:
        yield running
    finally:
        running.stop()
