"""waitForPodsReady's recoveryTimeout and requeuingStrategy.timestamp end to end on `berth up`,
through the CLI only (docs/admission-checks.md): a Job whose pods were all ready loses one
(it exits with failure while the other runs), is not ready again within recoveryTimeout, and
is evicted for PodsReadyTimeout (cause WaitForRecovery) and requeued after the backoff; then
it queues by its eviction time (Kueue's default ``Eviction``), behind a workload submitted
after it but before its eviction.

Every step waits for a fact, never for a time: the failing pod fails, and the workload that
holds the quota meanwhile finishes, only once the test creates their trigger files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.events import EvictionRequested, WorkloadAdmitted, WorkloadPodsReady
from tests.conftest import Stack, berth
from tests.e2e import (
    condition,
    event_log,
    eventually,
    get_json,
    is_admitted,
    job_manifest,
    submit_manifest,
)
from tests.test_e2e_admission_checks import PODS_READY

# The start clock (10m) never decides here; quota for one of the 2-cpu workloads at a time.
CONFIG = (
    PODS_READY.replace("nominalQuota: 4", "nominalQuota: 2")
    .replace("timeout: 3s", "timeout: 10m\n    recoveryTimeout: 2s")
    .replace("backoffLimitCount: 1", "backoffLimitCount: 3")
)


def _workload(url: str, name: str) -> dict[str, Any]:
    """The workload as `berth get workloads` shows it; an AssertionError (retried by
    ``eventually``) while it is not listed."""
    found = [w for w in get_json(url, "workloads") if w["metadata"]["name"] == name]
    assert found, f"{name} not listed"
    return found[0]


def _pending(url: str, name: str) -> bool:
    """Admission knows the workload, and it waits (no room while flaky runs)."""
    assert not is_admitted(_workload(url, name)), f"{name} admitted"
    return True


def _waits_for(trigger: Path, then: str) -> list[str]:
    return ["sh", "-c", f"while [ ! -f {trigger} ]; do sleep 0.1; done; {then}"]


def test_lost_readiness_evicts_after_recovery_timeout_and_requeues_by_eviction_time(
    stack: Stack, tmp_path: Path
) -> None:
    """flaky (2 pods, ready at start) loses pod 1 while pod 0 runs: PodsReady false, then
    evicted for PodsReadyTimeout (WaitForRecovery) and requeued after the backoff. Meanwhile
    `holder` (submitted after flaky) takes the quota; `later` (submitted after holder, before
    flaky's eviction) waits with flaky. When holder finishes, `later` is admitted, not flaky:
    flaky queues by its eviction time (with ``Creation`` it would go first, created first)."""
    url = stack.url
    config = tmp_path / "config.yaml"
    assert "recoveryTimeout: 2s" in CONFIG and "nominalQuota: 2" in CONFIG
    config.write_text(CONFIG)
    out = berth("apply", "-f", str(config), url=url)
    assert "recoveryTimeout" not in out.stderr, "acted on: no warning any more"
    fail, finish = tmp_path / "fail-now", tmp_path / "finish-now"

    flaky = job_manifest("flaky", cpu=1, command=["sleep", "600"])
    flaky["spec"].update(parallelism=2, completions=2)
    container = flaky["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [
        "sh",
        "-c",
        f'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then while [ ! -f {fail} ]; do sleep 0.1; done;'
        " exit 3; fi; exec sleep 600",
    ]
    submit_manifest(url, tmp_path, flaky)
    eventually(lambda: is_admitted(_workload(url, "flaky")), timeout=60)
    eventually(
        lambda: any(
            isinstance(e, WorkloadPodsReady) and e.workload.name == "flaky" for e in event_log(url)
        ),
        timeout=60,
    )
    submit_manifest(
        url, tmp_path, job_manifest("holder", cpu=2, command=_waits_for(finish, "exit 0"))
    )
    submit_manifest(url, tmp_path, job_manifest("later", cpu=2, command=["sleep", "600"]))
    eventually(lambda: _pending(url, "holder") and _pending(url, "later"), timeout=60)

    fail.touch()  # pod 1 of flaky exits 3 while pod 0 runs: readiness lost

    def evicted_for_recovery() -> EvictionRequested:
        found = [
            e
            for e in event_log(url)
            if isinstance(e, EvictionRequested) and e.workload.name == "flaky"
        ]
        assert found, "not evicted yet"
        return found[0]

    eviction = eventually(evicted_for_recovery, timeout=60)
    assert (eviction.reason, eviction.detail, eviction.generation) == (
        "PodsReadyTimeout",
        "WaitForRecovery",
        1,
    ), eviction
    assert eviction.requeue_at is not None and not eviction.deactivated

    # holder (first in the queue) takes the room; flaky comes back after its 1 s backoff.
    eventually(lambda: is_admitted(_workload(url, "holder")), timeout=60)

    def requeued() -> bool:
        state = condition(_workload(url, "flaky"), "Requeued")
        assert state is not None and state["reason"] == "BackoffFinished", state
        return True

    eventually(requeued, timeout=60)
    finish.touch()  # holder finishes: the room goes to the first in the queue

    def next_admitted() -> str:
        names = [
            e.workload.name
            for e in event_log(url)
            if isinstance(e, WorkloadAdmitted)
            and (e.workload.name, e.generation) in (("later", 1), ("flaky", 2))
        ]
        assert names, "neither admitted yet"
        return names[0]

    # With timestamp Creation this is flaky (created first); checked by hand when written.
    assert eventually(next_admitted, timeout=60) == "later", "flaky queues behind `later`"
    assert not is_admitted(_workload(url, "flaky"))

    facts = [
        (type(e).__name__, getattr(e, "ready", None), getattr(e, "generation", None))
        for e in event_log(url)
        if e.workload.name == "flaky" and isinstance(e, WorkloadPodsReady | WorkloadAdmitted)
    ]
    assert facts == [
        ("WorkloadAdmitted", None, 1),
        ("WorkloadPodsReady", True, 1),
        ("WorkloadPodsReady", False, 1),
    ], facts
