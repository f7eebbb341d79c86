"""`berth up`: the whole stack on one machine, supervised, and stopped without leftovers.

It starts nats-server with JetStream on loopback, then the four services as separate
processes (``python -m services.<name>``), waits until every ``/readyz`` answers 200 and prints
one ready line. A service that dies is restarted (with back-off) and reported. On Ctrl-C or
SIGTERM it stops the services first (SIGTERM, so they drain), then NATS, and kills whatever
has not exited within the grace period. Children run in their own sessions, so a Ctrl-C in
the terminal reaches only this supervisor, which stops them in that order.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from rich.console import Console
from rich.table import Table

from shared.natsserver import NatsServer, NatsServerError
from shared.service import DEFAULT_PORTS

__all__ = ["SERVICES", "Stack", "run_up"]

SERVICES = tuple(DEFAULT_PORTS)  # watcher, admission, preemption, recovery
GRACE_SECONDS = 10.0


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ServiceProcess:
    name: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_restart: float = 0.0
    log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Stack:
    def __init__(self, *, data_dir: Path, nats_port: int, console: Console) -> None:
        self.data_dir = data_dir
        self.console = console
        self.nats = NatsServer(store_dir=data_dir / "nats", port=nats_port)
        self.services: list[ServiceProcess] = []
        self.stopping = False

    def start(self) -> float:
        """Start everything; returns the seconds it took to be ready."""
        started = time.monotonic()
        self.start_nats()
        self.spawn_services()
        self.wait_ready(timeout=30.0)
        return time.monotonic() - started

    def start_nats(self) -> None:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.nats.start()

    def spawn_services(self) -> None:
        """Start the four services' processes (NATS must be up); returns without waiting."""
        for name in SERVICES:
            port = DEFAULT_PORTS[name] if _port_free(DEFAULT_PORTS[name]) else _free_port()
            service = ServiceProcess(name, port, self.data_dir / "logs" / f"{name}.log")
            self.services.append(service)
            self._spawn(service)

    def _spawn(self, service: ServiceProcess) -> None:
        env = {
            **os.environ,
            "BERTH_NATS_URL": self.nats.url,
            "BERTH_HTTP_HOST": "127.0.0.1",
            "BERTH_HTTP_PORT": str(service.port),
            "BERTH_DATA_DIR": str(self.data_dir),
            "BERTH_SUPERVISOR_PID": str(os.getpid()),
            "BERTH_GRACE_SECONDS": os.environ.get("BERTH_GRACE_SECONDS", str(GRACE_SECONDS - 2)),
        }
        if service.log_file is None:
            service.log_file = open(service.log_path, "ab")
        service.process = subprocess.Popen(
            [sys.executable, "-m", f"services.{service.name}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=service.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(self.services)
        while waiting:
            if self.stopping:
                raise KeyboardInterrupt
            for service in list(waiting):
                assert service.process is not None
                if service.process.poll() is not None:
                    raise RuntimeError(
                        f"{service.name} exited with code {service.process.returncode} while"
                        f" starting; see {service.log_path}"
                    )
                if _ready(service.url):
                    waiting.remove(service)
            if time.monotonic() > deadline:
                names = ", ".join(service.name for service in waiting)
                raise RuntimeError(f"not ready after {timeout:.0f}s: {names}")
            time.sleep(0.05)

    def supervise_once(self) -> None:
        """Restart a service that died; back off so a crash loop does not spin."""
        now = time.monotonic()
        for service in self.services:
            assert service.process is not None
            code = service.process.poll()
            if code is None or self.stopping:
                continue
            if service.next_restart == 0.0:
                delay = min(2.0**service.restarts, 30.0)
                service.next_restart = now + delay
                self.console.print(
                    f"[yellow]{service.name} exited with code {code}; restarting in {delay:.0f}s"
                    f" (log: {service.log_path})[/]"
                )
            elif now >= service.next_restart:
                service.restarts += 1
                service.next_restart = 0.0
                self._spawn(service)

    def stop(self) -> None:
        """Services first (they drain and publish their last events), then NATS."""
        self.stopping = True
        running = [s for s in self.services if s.process is not None and s.process.poll() is None]
        for service in running:
            assert service.process is not None
            service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for service in running:
            assert service.process is not None
            try:
                service.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(service.process.pid, signal.SIGKILL)
                service.process.wait()
        for service in self.services:
            if service.log_file is not None:
                service.log_file.close()
        self.nats.stop()

    def print_listening(self, console: Console) -> None:
        table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        for column in ("COMPONENT", "PID", "LISTENS ON", "LOG"):
            table.add_column(column, no_wrap=True)
        nats_pid = self.nats.process.pid if self.nats.process else ""
        table.add_row("nats", str(nats_pid), self.nats.url, str(self.data_dir / "nats"))
        for service in self.services:
            pid = service.process.pid if service.process else ""
            table.add_row(service.name, str(pid), service.url, str(service.log_path))
        console.print(table)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=0.5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def run_up(*, data_dir: Path, nats_port: int) -> int:
    console = Console(highlight=False)
    if nats_port and not _port_free(nats_port):
        console.print(f"[red]error: port {nats_port} is in use; choose another with --nats-port[/]")
        return 1
    stack = Stack(data_dir=data_dir, nats_port=nats_port, console=console)

    def request_stop(signum: int, _: FrameType | None) -> None:
        stack.stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        seconds = stack.start()
    except (RuntimeError, NatsServerError, KeyboardInterrupt) as error:
        if not isinstance(error, KeyboardInterrupt):
            console.print(f"[red]error: {error}[/]")
        stack.stop()
        return 1
    stack.print_listening(console)
    console.print(f"export BERTH_NATS_URL={stack.nats.url}")
    console.print(f"Berth is ready in {seconds:.2f}s. Press Ctrl-C to stop.")
    sys.stdout.flush()
    while not stack.stopping:
        stack.supervise_once()
        time.sleep(0.2)
    console.print("stopping...")
    stack.stop()
    console.print("stopped.")
    return 0
