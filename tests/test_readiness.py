"""The local backend's readiness (services/watcher/local/readiness.py): which probes it runs
and when a run counts as ready."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.watcher.local.readiness import ExecProbe, exec_probes, first_failure, wait_ready


def _pod(*containers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"main": {"containers": list(containers)}}


PROBES: list[tuple[dict[str, dict[str, Any]], list[ExecProbe], list[str], str]] = [
    (_pod({"name": "a", "command": ["sleep", "1"]}), [], [], "no probe: ready at start"),
    (
        _pod({"name": "a", "readinessProbe": {"exec": {"command": ["test", "-f", "x"]}}}),
        [ExecProbe("a", ["test", "-f", "x"])],
        [],
        "an exec probe with Kubernetes' defaults (period 10 s, timeout 1 s)",
    ),
    (
        _pod(
            {
                "name": "a",
                "readinessProbe": {
                    "exec": {"command": ["true"]},
                    "initialDelaySeconds": 2,
                    "periodSeconds": 3,
                    "timeoutSeconds": 4,
                },
            }
        ),
        [ExecProbe("a", ["true"], initial_delay=2.0, period=3.0, timeout=4.0)],
        [],
        "its timings are read",
    ),
    (
        _pod({"name": "web", "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}),
        [],
        ["web"],
        "an httpGet probe cannot be run locally: skipped, named",
    ),
]


@pytest.mark.parametrize(
    ("pod_specs", "probes", "skipped", "why"), PROBES, ids=[p[3] for p in PROBES]
)
def test_exec_probes(
    pod_specs: dict[str, dict[str, Any]], probes: list[ExecProbe], skipped: list[str], why: str
) -> None:
    """The probes the local backend runs, and those it cannot."""
    assert exec_probes(pod_specs) == (probes, skipped), why


READY: list[tuple[list[str], bool, bool, str]] = [
    (["true"], True, True, "a passing probe: ready"),
    (["false"], False, False, "a failing probe while the run stops: never reported ready"),
    (["/nonexistent/probe"], False, False, "a missing command fails, as in a container"),
]


@pytest.mark.parametrize(("command", "stays", "expected", "why"), READY, ids=[r[3] for r in READY])
async def test_wait_ready(command: list[str], stays: bool, expected: bool, why: str) -> None:
    """Real processes: a run that stops before its probe passes is not ready."""
    calls = 0

    def running() -> bool:
        nonlocal calls
        calls += 1
        return stays or calls < 3  # a stopping run: gone after two probes

    probe = ExecProbe("a", command, period=0.01)
    assert await wait_ready([probe], running=running) is expected, why


FAILURES: list[tuple[list[str], bool, tuple[str, int] | None, str]] = [
    (["exit 3", "sleep 0.5"], True, ("a", 3), "a pod fails while another runs: readiness lost"),
    (["exit 0", "sleep 0.2"], True, None, "a pod that succeeds stays counted, as in a Job"),
    (["exit 3"], True, None, "the last pod failing is the run's finish, not a loss"),
    (["exit 3", "sleep 0.2"], False, None, "a stopping run's exits are not failures"),
]


@pytest.mark.parametrize(
    ("scripts", "goes_on", "expected", "why"), FAILURES, ids=[f[3] for f in FAILURES]
)
async def test_first_failure(
    scripts: list[str], goes_on: bool, expected: tuple[str, int] | None, why: str
) -> None:
    """Real processes: which exit is a loss of readiness."""
    processes = [
        (name, await asyncio.create_subprocess_exec("sh", "-c", script))
        for name, script in zip("abc", scripts, strict=False)
    ]
    try:
        assert await first_failure(processes, running=lambda: goes_on) == expected, why
    finally:
        for _, process in processes:
            if process.returncode is None:
                process.kill()
            await process.wait()
