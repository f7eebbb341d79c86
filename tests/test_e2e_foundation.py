"""Seed 003 end to end on `berth up`: real NATS, four service processes, real job processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from shared.events import WorkloadAdmitted, WorkloadFinished, WorkloadStarted, WorkloadSubmitted
from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import (
    condition,
    event_log,
    eventually,
    get_json,
    is_admitted,
    peak_usage,
    pid_alive,
)

GPU = 1000  # one nvidia.com/gpu in milli-units


def gpu_job(name: str, flag: Path) -> str:
    """A Job asking 1 GPU whose process runs until the test creates ``flag``."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels:
    kueue.x-k8s.io/queue-name: user-queue
    kueue.x-k8s.io/priority-class: dev-priority
spec:
  template:
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "echo started {name}; while [ ! -e {flag} ]; do sleep 0.05; done; echo done"]
        resources:
          requests: {{cpu: "500m", memory: 1G, nvidia.com/gpu: "1"}}
      restartPolicy: Never
"""


def _by_name(url: str) -> dict[str, dict[str, object]]:
    return {w["metadata"]["name"]: w for w in get_json(url, "workloads")}


def _cluster_queue(url: str) -> dict[str, int]:
    [queue] = get_json(url, "clusterqueues")
    status = queue["status"]
    return {k: status[k] for k in ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads")}


def test_seed_003_three_gpu_jobs_admitted_one_at_a_time(stack: Stack, tmp_path: Path) -> None:
    """One GPU of quota: one job runs, two wait with a reason; each finish admits the next,
    and a killed admission process comes back without losing or doubling anything."""
    url = stack.url
    applied = berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url).stdout
    assert "clusterqueue.kueue.x-k8s.io/cluster-queue created" in applied
    assert "workloadpriorityclass.kueue.x-k8s.io/dev-priority created" in applied

    flags = {name: tmp_path / f"{name}.done" for name in ("job-1", "job-2", "job-3")}
    for name, flag in flags.items():
        job = tmp_path / f"{name}.yaml"
        job.write_text(gpu_job(name, flag))
        assert (
            berth("submit", "-f", str(job), url=url).stdout.strip() == f"job.batch/{name} created"
        )
        time.sleep(0.05)  # distinct creation times: FIFO within one priority

    def first_admitted() -> dict[str, dict[str, object]]:
        workloads = _by_name(url)
        assert [n for n, w in workloads.items() if is_admitted(w)] == ["job-1"]
        for name in ("job-2", "job-3"):
            reserved = condition(workloads[name], "QuotaReserved")
            assert reserved is not None and reserved["status"] == "False"
            assert "insufficient unused quota for nvidia.com/gpu" in reserved["message"]
        return workloads

    eventually(first_admitted)
    assert _cluster_queue(url) == {
        "pendingWorkloads": 2,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
    }
    job_log = stack.data_dir / "logs" / "default" / "job-1" / "1-main-0.log"
    eventually(lambda: job_log.exists() and "started job-1" in job_log.read_text())

    # Kill admission mid-flight; `berth up` restarts it and it rebuilds from the stream.
    killed = stack.pids["admission"]
    os.kill(killed, signal.SIGKILL)
    eventually(lambda: not pid_alive(killed))  # what answers from now on is its successor
    eventually(first_admitted, timeout=30)

    flags["job-1"].touch()

    def second_admitted() -> bool:
        workloads = _by_name(url)
        finished = condition(workloads["job-1"], "Finished")
        assert finished is not None and finished["reason"] == "Succeeded"
        assert [n for n, w in workloads.items() if is_admitted(w)] == ["job-2"]
        return True

    eventually(second_admitted)
    assert _cluster_queue(url) == {
        "pendingWorkloads": 1,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
    }

    flags["job-2"].touch()
    flags["job-3"].touch()
    eventually(lambda: all(condition(w, "Finished") for w in _by_name(url).values()))
    assert _cluster_queue(url) == {
        "pendingWorkloads": 0,
        "reservingWorkloads": 0,
        "admittedWorkloads": 0,
    }

    events = event_log(url)
    admitted = [e for e in events if isinstance(e, WorkloadAdmitted)]
    assert sorted(e.workload.name for e in admitted) == ["job-1", "job-2", "job-3"]  # never twice
    assert len([e for e in events if isinstance(e, WorkloadSubmitted)]) == 3
    assert len([e for e in events if isinstance(e, WorkloadStarted)]) == 3
    assert all(e.succeeded for e in events if isinstance(e, WorkloadFinished))
    assert peak_usage(events)[("cluster-queue", "default-flavor", "nvidia.com/gpu")] == GPU


def test_shutdown_leaves_no_process_behind(stack: Stack, tmp_path: Path) -> None:
    """Ctrl-C/SIGTERM on `berth up` stops the services, NATS and the running jobs."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    job = tmp_path / "job.yaml"
    job.write_text(gpu_job("sleeper", tmp_path / "never"))
    berth("submit", "-f", str(job), url=url)
    eventually(lambda: is_admitted(_by_name(url)["sleeper"]))
    job_log = stack.data_dir / "logs" / "default" / "sleeper" / "1-main-0.log"
    eventually(lambda: job_log.exists() and "started" in job_log.read_text())
    pids = list(stack.pids.values())
    assert stack.stop() == 0
    time.sleep(0.2)
    for pid in pids:
        assert not _alive(pid), f"pid {pid} outlived berth up"
    assert not any("sleeper" in _cmdline(pid) for pid in _all_pids())
    # Every service's tasks ended on their own within the grace period: none was cancelled
    # (a task that never watches for shutdown holds every stop for the whole grace).
    logs = {p.name: p.read_text() for p in (stack.data_dir / "logs").glob("*.log")}
    assert {"admission.log", "preemption.log", "recovery.log", "watcher.log"} <= set(logs)
    for name, text in logs.items():
        assert '"stopped"' in text, name
        assert '"tasks_cancelled"' not in text, name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
