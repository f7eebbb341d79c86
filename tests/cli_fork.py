"""The `berth` CLI for the tests, as a process of its own without its imports each time.

`python -m berth_cli` spends ~0.3 s of CPU importing (nats, aiohttp, structlog, click...)
before it does anything, and the suite runs the CLI some thousands of times, most of them in
``eventually`` polls. So :func:`command` gives the command line of a small client instead
(``python -I -S``, stdlib only: ~15 ms) that hands its argv, environment, working directory
and its stdin, stdout and stderr (the file descriptors themselves, over a Unix socket) to a
server that imported the CLI once (:func:`serve`, one per test session). For each call the
server forks; the fork forks the CLI process, which takes the caller's descriptors as its
0, 1 and 2, its environment, directory and argv, then runs ``berth_cli`` as ``-m`` would; the
first fork waits for it and sends back its exit status, which the client exits with (killed
by a signal: by the same signal). If the client dies first (``subprocess.run``'s timeout
kills it), the CLI process is killed too.

So each call is still a process of its own, started from nothing the tests touched (the
server imports the CLI and nothing else, and runs no thread), with the caller's environment,
descriptors and exit status; only the imports are done ahead. ``BERTH_TEST_CLI_FORK=0``
runs ``python -m berth_cli`` instead (e.g. to compare).

One thing is shared: every fork has the server's hash seed (``PYTHONHASHSEED`` is read at an
interpreter's start and str hashing cannot be reseeded after it), so the iteration order of a
set of strings (or a dict built from one) is the same in every call of a test session, where
``python -m berth_cli`` calls differ run to run. A test must not rely on that order; one that
checks an output is independent of it runs with ``BERTH_TEST_CLI_FORK=0``.

For calls run to their end (``subprocess.run``, as :func:`tests.conftest.berth` does): a
signal sent to the client is not passed on, so a test that interrupts the CLI (``-w``,
``-f``, Ctrl-C) starts ``python -m berth_cli`` itself.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["command", "serve"]

REPO = Path(__file__).resolve().parent.parent

CLIENT = """\
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
body = json.dumps({"argv": sys.argv[2:], "env": dict(os.environ), "cwd": os.getcwd()}).encode()
socket.send_fds(s, [len(body).to_bytes(8, "big")], [0, 1, 2])
s.sendall(body)
reply = b""
while chunk := s.recv(64):
    reply += chunk
code = int(reply)
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""

_server: subprocess.Popen[bytes] | None = None
_socket_path = ""


def command(args: tuple[str, ...] | list[str]) -> list[str]:
    """The command line that runs ``berth *args``."""
    if os.environ.get("BERTH_TEST_CLI_FORK", "1") == "0":
        return [sys.executable, "-m", "berth_cli", *args]
    return [sys.executable, "-I", "-S", "-c", CLIENT, _started(), *args]


def _started() -> str:
    """The server's socket, started on first use (stopped when this process exits)."""
    global _server, _socket_path
    if _server is None or _server.poll() is not None:
        folder = Path(tempfile.mkdtemp(prefix="berth-cli-"))
        _socket_path = str(folder / "cli.sock")
        with (folder / "server.log").open("ab") as log:  # not a test's captured stderr
            _server = subprocess.Popen(
                [sys.executable, "-m", "tests.cli_fork", _socket_path],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # runs after the kill
        atexit.register(_server.kill)
        deadline = time.monotonic() + 30
        while not os.path.exists(_socket_path):  # bound before it imports the CLI
            if _server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the CLI server did not start ({_server.returncode})")
            time.sleep(0.005)
    return _socket_path


def serve(path: str) -> None:
    """Accept calls until the process that started this one is gone; return only in a CLI
    process (a fork of a fork), set up to run ``berth_cli`` as the caller asked."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    import berth_cli.main  # noqa: F401 (imported once, here: what every fork saves)

    gc.freeze()  # what it imported is never collected in a fork: no copy of those pages

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # calls' first forks are reaped by the OS
    listener.settimeout(1.0)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:
                sys.exit(0)
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _call(connection)  # returns in the CLI process only
            return
        connection.close()


def _call(connection: socket.socket) -> None:
    """One call: receive it, fork the CLI process, report its exit status."""
    connection.settimeout(None)
    header, fds, _, _ = socket.recv_fds(connection, 8, 3)
    size = int.from_bytes(header, "big")
    body = b""
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:  # the client died before it sent its call: nothing to run
            os._exit(1)
        body += chunk
    request = json.loads(body)
    cli = os.fork()
    if cli == 0:
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["berth", *request["argv"]]
        return
    for fd in fds:
        os.close(fd)
    finished = os.pidfd_open(cli)
    readable, _, _ = select.select([connection.fileno(), finished], [], [])
    if finished not in readable:  # the client went away (killed on its timeout)
        os.kill(cli, signal.SIGKILL)
    _, status = os.waitpid(cli, 0)
    try:
        connection.sendall(str(os.waitstatus_to_exitcode(status)).encode())
    finally:
        os._exit(0)


if __name__ == "__main__":
    serve(sys.argv[1])
    import runpy

    runpy.run_module("berth_cli", run_name="__main__", alter_sys=True)
