"""A service's exit after SIGTERM: drained, its last lines written, then out without the
interpreter's teardown (shared/service.py ``_exit_without_teardown``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from berth_cli.nats_cluster import free_port
from berth_cli.up import _ready as ready
from tests.conftest import REPO
from tests.e2e import eventually

# A service whose main registers an exit hook: the interpreter's teardown would run it.
SERVICE = """
import atexit, sys
from pathlib import Path
from shared.service import run_service

async def main(runtime):
    atexit.register(Path(sys.argv[1]).write_text, "torn down")
    runtime.set_ready()
    await runtime.stopping.wait()

run_service("preemption", main)
"""


def test_a_stopped_service_exits_drained_without_tearing_its_heap_down(
    nats_url: str, tmp_path: Path
) -> None:
    port = free_port()
    marker = tmp_path / "teardown-ran"
    env = {
        **os.environ,
        "BERTH_NATS_URL": nats_url,
        "BERTH_HTTP_PORT": str(port),
        "BERTH_DATA_DIR": str(tmp_path),
    }
    env.pop("BERTH_CREDS", None)
    process = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(marker)],
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        eventually(lambda: ready(f"http://127.0.0.1:{port}"))
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)  # read while it exits: no full pipe
        assert process.returncode == 0, "a clean stop exits 0"
        assert b'"event":"stopped"' in stderr, "the last line is written"
        assert not marker.exists(), "the interpreter's teardown (exit hooks, freeing) was skipped"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
