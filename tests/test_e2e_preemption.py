"""Preemption end to end on `berth up`: seeds 004, 003 and 002 with real processes.

Each test asserts from the event log that quota was never over-committed at any instant,
and that an evicted workload's process was really stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.events import EvictionRequested, WorkloadAdmitted, WorkloadEvicted
from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import (
    condition,
    event_log,
    eventually,
    get_json,
    is_admitted,
    job_manifest,
    objects_status,
    peak_usage,
    pid_alive,
    submit_manifest,
)


def _workloads(url: str, *args: str) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in get_json(url, "workloads", *args)}


def _running_pids(url: str, namespace: str, name: str) -> list[int]:
    def pids() -> list[int]:
        status = objects_status(url, namespace, name)
        assert status.get("phase") == "Running" and status.get("pids"), status
        return [int(pid) for pid in status["pids"]]

    result: list[int] = eventually(pids)
    return result


def test_seed_004_team_a_preempts_team_b(stack: Stack) -> None:
    """Team B's borrowed CPU is reclaimed for team A's 2-GPU job; B's process stops."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed004-kueue-resources.yaml"), url=url)
    berth("submit", "-f", str(FIXTURES / "seed004-team-b-job.yaml"), url=url)
    eventually(lambda: is_admitted(_workloads(url, "-n", "team-b")["team-b-job"]))
    team_b_pids = _running_pids(url, "team-b", "team-b-job")

    berth("submit", "-f", str(FIXTURES / "seed004-team-a-job.yaml"), url=url)

    def team_a_runs() -> bool:
        team_a = _workloads(url, "-n", "team-a")["team-a-job"]
        team_b = _workloads(url, "-n", "team-b")["team-b-job"]
        assert is_admitted(team_a)
        preempted = condition(team_b, "Preempted")
        assert preempted is not None and preempted["reason"] == "InCohortReclaimWhileBorrowing"
        assert not is_admitted(team_b)
        return True

    eventually(team_a_runs, timeout=30)
    assert not any(pid_alive(pid) for pid in team_b_pids)
    _running_pids(url, "team-a", "team-a-job")

    events = event_log(url)
    evictions = [e for e in events if isinstance(e, EvictionRequested)]
    assert [(e.workload.name, e.detail, e.preemptor and e.preemptor.name) for e in evictions] == [
        ("team-b-job", "InCohortReclaimWhileBorrowing", "team-a-job")
    ]
    cohort = {"team-a-cq": "team-ab", "team-b-cq": "team-ab", "shared-cq": "team-ab"}
    peak = peak_usage(events, groups=cohort)
    assert peak[("team-ab", "default-flavor", "cpu")] <= 10_000  # the cohort's 10 CPUs
    assert peak[("team-ab", "gpu-flavor", "nvidia.com/gpu")] <= 2_000
    # Team A was admitted only after team B's eviction completed.
    order = [
        (type(e).__name__, e.workload.name)
        for e in events
        if isinstance(e, WorkloadAdmitted | WorkloadEvicted)
    ]
    assert order.index(("WorkloadEvicted", "team-b-job")) < order.index(
        ("WorkloadAdmitted", "team-a-job")
    )


def test_seed_003_prod_preempts_dev_then_quota_raise_admits_all(
    stack: Stack, tmp_path: Path
) -> None:
    """A prod job evicts a running dev job in the one-GPU queue; raising the quota then
    admits every pending dev job at once, and the preempted one runs again."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    for index in range(3):
        submit_manifest(
            url, tmp_path, job_manifest(f"dev-{index}", cpu=1, gpu=1, priority_class="dev-priority")
        )
    eventually(lambda: [n for n, w in _workloads(url).items() if is_admitted(w)] == ["dev-0"])
    dev_pids = _running_pids(url, "default", "dev-0")

    submit_manifest(
        url, tmp_path, job_manifest("prod", cpu="1", gpu=1, priority_class="prod-priority")
    )

    def prod_runs() -> bool:
        workloads = _workloads(url)
        assert [n for n, w in workloads.items() if is_admitted(w)] == ["prod"]
        preempted = condition(workloads["dev-0"], "Preempted")
        assert preempted is not None and preempted["reason"] == "InClusterQueue"
        return True

    eventually(prod_runs, timeout=30)
    assert not any(pid_alive(pid) for pid in dev_pids)

    berth("apply", "-f", str(FIXTURES / "seed003-quota-raise.yaml"), url=url)
    eventually(lambda: all(is_admitted(w) for w in _workloads(url).values()))
    [queue] = get_json(url, "clusterqueues")
    assert queue["status"]["admittedWorkloads"] == 4 and queue["status"]["pendingWorkloads"] == 0

    events = event_log(url)
    peak = peak_usage(events)
    assert max(v for (cq, _, r), v in peak.items() if r == "nvidia.com/gpu") <= 4_000
    admissions = [e.workload.name for e in events if isinstance(e, WorkloadAdmitted)]
    assert sorted(admissions) == ["dev-0", "dev-0", "dev-1", "dev-2", "prod"]


def test_seed_002_high_preempts_low_and_low_comes_back(stack: Stack, tmp_path: Path) -> None:
    """Two 6-CPU jobs on a 9-CPU quota: high preempts low; low runs again after high ends."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    submit_manifest(url, tmp_path, job_manifest("job1", cpu="6", priority_class="low-priority"))
    eventually(lambda: is_admitted(_workloads(url)["job1"]))
    low_pids = _running_pids(url, "default", "job1")

    submit_manifest(
        url,
        tmp_path,
        job_manifest("job2", cpu="6", priority_class="high-priority", command=["sleep", "2"]),
    )

    def high_runs() -> bool:
        workloads = _workloads(url)
        assert is_admitted(workloads["job2"]) and not is_admitted(workloads["job1"])
        return True

    eventually(high_runs, timeout=30)
    assert not any(pid_alive(pid) for pid in low_pids)

    def low_back() -> bool:
        workloads = _workloads(url)
        finished = condition(workloads["job2"], "Finished")
        assert finished is not None and finished["reason"] == "Succeeded"
        assert is_admitted(workloads["job1"])
        return True

    eventually(low_back, timeout=30)
    events = event_log(url)
    assert peak_usage(events)[("cluster-queue", "default-flavor", "cpu")] <= 9_000
    evictions = [e for e in events if isinstance(e, EvictionRequested)]
    assert len(evictions) == 1 and evictions[0].workload.name == "job1"
