"""Credentials are injected: nothing below an entry point reads the environment for them.

``Bus.connect`` (and what wraps it) takes ``auth`` with no default, so a caller that forgets
it fails at the call; only the entry points (a service's main, the CLI's connection helper,
the console's entry) read ``BERTH_CREDS``, and each of them, started on a secured bus with an
environment that names no usable seed, stops with one line naming the credential at fault.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from bench.eventlog import read_events
from berth_cli.nats_cluster import free_port
from shared.auth import CredentialStore
from shared.bus import Bus
from tests.conftest import REPO

# (what is called without credentials, why it must refuse)
UNCREDENTIALED: list[tuple[Callable[[], Coroutine[Any, Any, Any]], str]] = [
    (
        lambda: Bus.connect("nats://127.0.0.1:4222", source="admission"),  # type: ignore[call-arg]
        "the bus itself: no fallback to the seed the environment names for `source`",
    ),
    (
        lambda: read_events("nats://127.0.0.1:4222"),  # type: ignore[call-arg]
        "a wrapper of Bus.connect (the event-log reader) passes the requirement on",
    ),
]


@pytest.mark.parametrize(("call", "reason"), UNCREDENTIALED, ids=[c[1] for c in UNCREDENTIALED])
def test_a_connection_without_credentials_fails_at_the_call(
    call: Callable[[], Coroutine[Any, Any, Any]], reason: str
) -> None:
    with pytest.raises(TypeError, match="'auth'"):
        call().close()  # raised before any coroutine exists, so before any network


def _entry_point(argv: list[str], url: str, home: Path, creds: Path | None) -> str:
    """Run one entry point with an environment of its own: the secured bus's URL, a home and
    a data dir holding no seed, ``BERTH_CREDS`` only if ``creds``; its output once it exits."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "BERTH_DATA_DIR": str(home / "berth"),
        "BERTH_NATS_URL": url,
        "BERTH_HTTP_PORT": str(free_port()),
        "BERTH_CONSOLE_PORT": "0",
    }
    if creds is not None:
        env["BERTH_CREDS"] = str(creds)
    result = subprocess.run(
        [sys.executable, *argv], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    return result.stdout + result.stderr


SERVICE = ["-m", "services.admission"]
CLI = ["-m", "berth_cli", "get", "clusterqueues"]
CONSOLE = ["-m", "berth_console"]

# (entry point, seed given, what the message must name, why)
REFUSALS = [
    (SERVICE, False, "admission.nk is missing", "a service names its own user's seed"),
    (CLI, False, "cli.nk is missing", "the CLI names the cli user's seed"),
    (CONSOLE, False, "console.nk is missing", "the console names the console user's seed"),
    (SERVICE, True, "refused the credentials in {seed}", "a seed NATS does not know, by its path"),
]


@pytest.mark.parametrize(
    ("argv", "given", "named", "reason"), REFUSALS, ids=[c[3] for c in REFUSALS]
)
def test_an_entry_point_without_usable_credentials_names_the_missing_one(
    argv: list[str],
    given: bool,
    named: str,
    reason: str,
    secured_url: str,
    tmp_path: Path,
) -> None:
    seed: Path | None = None
    if given:  # a seed of another installation's: well formed, unknown to this NATS
        other = CredentialStore(tmp_path / "other")
        other.ensure()
        seed = other.seed_path("admission")
    output = _entry_point(argv, secured_url, tmp_path / "home", seed)
    assert named.format(seed=seed) in output, reason
    assert "BERTH_CREDS" in output, "the message names the remedy"
    assert "Traceback" not in output, "one line, not a crash"
