"""tests/cli_fork.py, the CLI server's side of one call (``_call``): a client that dies before
it has sent all of its call ends the call's fork (it used to read an empty socket for ever, at
full CPU). The fork runs as a process of its own with one end of a socket pair; this test is
the dying client at the other end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.cli_fork import REPO

SERVER_SIDE = """\
import socket, sys
from tests.cli_fork import _call
_call(socket.socket(fileno=int(sys.argv[1])))
"""

# (what the client sends before it dies, reason)
DYING = [
    (b"", "nothing of the call's body"),
    (b'{"argv": [', "part of the body"),
]


@pytest.mark.parametrize(("sent", "reason"), DYING, ids=[reason for _, reason in DYING])
def test_a_client_dying_mid_call_ends_the_calls_fork(sent: bytes, reason: str) -> None:
    client, server = socket.socketpair(socket.AF_UNIX)
    with open(os.devnull, "rb") as null:
        fork = subprocess.Popen(
            [sys.executable, "-c", SERVER_SIDE, str(server.fileno())],
            cwd=REPO,
            pass_fds=[server.fileno()],
        )
        server.close()
        socket.send_fds(client, [(1000).to_bytes(8, "big")], [null.fileno()] * 3)
    client.sendall(sent)
    client.close()
    try:
        code = fork.wait(timeout=20)  # a bound, not a speed: the old loop never ended
    finally:
        fork.kill()
        fork.wait()
    assert code == 1, reason
