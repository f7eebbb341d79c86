"""The local backend's readiness (services/watcher/local/readiness.py): which probes it runs
and when a run counts as ready."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from services.watcher.local.readiness import (
    ExecProbe,
    exec_probes,
    first_failure,
    readiness_changes,
    wait_ready,
)


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
        _pod(
            {
                "name": "a",
                "readinessProbe": {
                    "exec": {"command": ["true"]},
                    "failureThreshold": 5,
                    "successThreshold": 2,
                },
            }
        ),
        [ExecProbe("a", ["true"], failure_threshold=5, success_threshold=2)],
        [],
        "its thresholds are read (kept probing once ready; defaults 3 and 1)",
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


# (why, probed, steps): each step an action and the change it must bring, or None for "the
# changes end". Actions: "unready"/"ready" remove/create the probe's file, "fail" makes pod a
# exit 3 while pod b runs, "end" makes both exit 0 (the run ends well).
LOST = (False, "readiness probe of c failed 2 times")
BACK = (True, "every readiness probe passes again")
FAILED = (False, "pod a exited with code 3 while others run")
CHANGES: list[tuple[str, bool, list[tuple[str, tuple[bool, str] | None]]]] = [
    (
        "a probe that fails failureThreshold times is a loss, passing again a recovery",
        True,
        [("unready", LOST), ("ready", BACK), ("end", None)],
    ),
    ("a failed process is a loss for good: nothing restarts it", False, [("fail", FAILED)]),
    (
        "a process failing while a probe already says not ready is no second loss",
        True,
        [("unready", LOST), ("fail", None)],
    ),
    ("without probes nothing changes until the run ends", False, [("end", None)]),
]


@pytest.mark.parametrize(("why", "probed", "steps"), CHANGES, ids=[c[0] for c in CHANGES])
async def test_readiness_changes(
    why: str, probed: bool, steps: list[tuple[str, tuple[bool, str] | None]], tmp_path: Path
) -> None:
    """Real processes and probes: each readiness change of a run already ready."""
    ok, fail, end = tmp_path / "ok", tmp_path / "fail", tmp_path / "end"
    ok.touch()
    scripts = [
        f"while true; do [ -f {fail} ] && exit 3; [ -f {end} ] && exit 0; sleep 0.02; done",
        f"while [ ! -f {end} ]; do sleep 0.02; done",
    ]
    processes = [
        (name, await asyncio.create_subprocess_exec("sh", "-c", script))
        for name, script in zip("ab", scripts, strict=True)
    ]
    probe = ExecProbe("c", ["test", "-f", str(ok)], period=0.01, failure_threshold=2)
    changes = readiness_changes(processes, [probe] if probed else [], running=lambda: True)
    files: dict[str, Callable[[], object]] = {
        "unready": ok.unlink,
        "ready": ok.touch,
        "fail": fail.touch,
        "end": end.touch,
    }
    try:
        for action, expected in steps:
            files[action]()
            if expected is None:
                with pytest.raises(StopAsyncIteration):
                    await anext(changes)
            else:
                assert await anext(changes) == expected, why
    finally:
        await changes.aclose()
        end.touch()
        for _, process in processes:
            await process.wait()
