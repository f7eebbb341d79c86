"""The one deactivation end to end on `berth up`, through the CLI only: a workload deactivated
by its maximumExecutionTimeSeconds and one deactivated by a Rejected admission check are shown
inactive with Kueue's reason, and `berth resume workload` brings each back: it runs again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.events import WorkloadStarted
from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import condition, event_log, eventually, get_json, job_manifest, submit_manifest
from tests.test_e2e_admission_checks import CHECKED

# The plain queue (user-queue, 2 CPUs) of the seed, and a checked one beside it.
CHECKED_QUEUE = CHECKED.replace(
    "{name: user-queue, namespace: default}", "{name: checked-queue, namespace: default}"
)


def _workload(url: str, name: str) -> dict[str, Any]:
    return next(w for w in get_json(url, "workloads") if w["metadata"]["name"] == name)


def _started(url: str, name: str) -> list[int]:
    """The admissions of ``name`` the watcher started, from the event stream."""
    return [
        e.generation
        for e in event_log(url)
        if isinstance(e, WorkloadStarted) and e.workload.name == name
    ]


def _inactive(url: str, name: str, reason: str) -> dict[str, Any]:
    """Inactive, out of its queue, with Kueue's Evicted reason shown in -o json."""
    workload = _workload(url, name)
    evicted = condition(workload, "Evicted")
    reserved = condition(workload, "QuotaReserved")
    assert evicted is not None and evicted["reason"] == reason, workload["status"]
    assert reserved is not None and reserved["reason"] == "Inactive", workload["status"]
    assert workload["spec"]["active"] is False, workload["spec"]
    assert workload["status"]["berth"]["deactivation"]["reason"] == reason
    return workload


# (why, the workload, its queue, Kueue's reason once deactivated)
CASES = [
    (
        "its maximumExecutionTimeSeconds passed",
        "limited",
        "user-queue",
        "DeactivatedDueToMaximumExecutionTimeExceeded",
    ),
    (
        "its admission check was Rejected",
        "rejected",
        "checked-queue",
        "DeactivatedDueToAdmissionCheck",
    ),
]


def test_resume_brings_back_whatever_deactivated_it(stack: Stack, tmp_path: Path) -> None:
    """Each case (see CASES): deactivated with its reason, shown in get -o wide and
    describe; `berth resume workload` says resumed and the workload is started again."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    config = tmp_path / "checked.yaml"
    config.write_text(CHECKED_QUEUE)
    assert CHECKED_QUEUE != CHECKED
    berth("apply", "-f", str(config), url=url)
    limited = job_manifest("limited", cpu=1, command=["sleep", "600"])
    limited["metadata"]["annotations"] = {"kueue.x-k8s.io/max-exec-time-seconds": "3"}
    submit_manifest(url, tmp_path, limited)
    rejected = job_manifest("rejected", cpu=1, queue="checked-queue", command=["sleep", "600"])
    submit_manifest(url, tmp_path, rejected)

    def reserved_waiting() -> bool:
        checks = _workload(url, "rejected")["status"].get("admissionChecks", [])
        assert [(c["name"], c["state"]) for c in checks] == [("budget", "Pending")], checks
        return True

    eventually(reserved_waiting, timeout=60)
    berth("admissioncheck", "set", "rejected", "budget", "Rejected", "--message", "no", url=url)

    for why, name, _, reason in CASES:
        eventually(lambda n=name, r=reason: _inactive(url, n, r), timeout=60)  # type: ignore[misc]
        wide = berth("get", "workloads", "-o", "wide", url=url).stdout
        line = next(row for row in wide.splitlines() if row.startswith(name))
        assert "inactive (spec.active: false) due to" in line, (why, wide)
        described = berth("describe", "workload", name, url=url).stdout
        assert reason in described, (why, described)

    started_before = {name: _started(url, name) for _, name, _, _ in CASES}
    assert started_before == {"limited": [1], "rejected": []}, started_before
    for why, name, _, _ in CASES:
        result = berth("resume", "workload", name, url=url)
        assert result.stdout.strip() == f"workload.kueue.x-k8s.io/{name} resumed", (why, result)

    # Limited runs again at once (a fresh budget); rejected is reserved again, its check
    # Pending again, and a Ready answer starts it.
    eventually(lambda: _started(url, "limited") == [1, 2], timeout=60)
    eventually(reserved_waiting, timeout=60)
    berth("admissioncheck", "set", "rejected", "budget", "Ready", url=url)
    eventually(lambda: _started(url, "rejected") == [2], timeout=60)
    requeued = condition(_workload(url, "rejected"), "Requeued")
    assert requeued is not None and requeued["reason"] == "Reactivated", requeued
