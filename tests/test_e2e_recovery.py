"""Managed jobs end to end on `berth up`: seeds 001 and 002, retries, cancel, restarts."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, Stack, berth, start_stack
from tests.e2e import eventually
from tests.stack_pool import StackPool

SEED_001 = FIXTURES / "seed001"
SEED_002 = FIXTURES / "seed002"


def jobs(url: str) -> dict[int, dict[str, Any]]:
    output = berth("jobs", "queue", "-o", "json", url=url).stdout
    return {job["id"]: job for job in json.loads(output)}


def status(url: str, job_id: int) -> str:
    return str(jobs(url)[job_id]["status"])


def launch(url: str, *args: str, check: bool = True) -> int:
    result = berth("jobs", "launch", *args, url=url, check=check)
    first = result.stdout.split()
    assert first[:3] == ["Managed", "job", "ID:"], result.stdout + result.stderr
    return int(first[3])


def test_seed_001_low_job_recovers_after_high_job(stack: Stack) -> None:
    """Low runs; high preempts it (low RECOVERING, #RECOVERIES 1); high succeeds; low runs
    again from the start and succeeds; its log holds both runs."""
    url = stack.url
    berth("apply", "-f", str(SEED_001 / "cluster.yaml"), url=url)
    berth("apply", "-f", str(SEED_001 / "priorities.yaml"), url=url)
    low = launch(url, str(SEED_001 / "low-priority-job.yaml"))
    eventually(lambda: status(url, low) == "RUNNING")
    high = launch(url, str(SEED_001 / "high-priority-job.yaml"))

    def preempted() -> str:
        table = berth("jobs", "queue", url=url).stdout
        assert "In progress tasks: 1 RECOVERING, 1 RUNNING" in table
        return table

    table = eventually(preempted, timeout=30)
    assert "#RECOVERIES" in table and "TOT. DURATION" in table and "1x[CPU:4]" in table

    eventually(lambda: status(url, high) == "SUCCEEDED", timeout=30)
    eventually(lambda: status(url, low) in ("STARTING", "RUNNING", "SUCCEEDED"), timeout=30)
    eventually(lambda: status(url, low) == "SUCCEEDED", timeout=30)
    final = jobs(url)
    assert final[low]["recoveries"] == 1 and final[high]["recoveries"] == 0
    assert [step["status"] for step in final[low]["history"]] == [
        "PENDING",
        "STARTING",
        "RUNNING",
        "RECOVERING",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]
    log = berth("jobs", "logs", str(low), url=url).stdout
    assert log.count("Low priority counter: 0") == 2  # the first run, then the recovered one
    assert "Low priority counter: 7" in log
    assert "High priority counter: 11" in berth("jobs", "logs", str(high), url=url).stdout


def test_seed_002_managed_jobs_on_a_9_cpu_quota(stack: Stack) -> None:
    """Two 6-CPU managed jobs: the second waits; a high-priority third preempts the running
    one, which is re-submitted automatically and finishes."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    task = str(SEED_002 / "sky-kueue-task.yaml")
    job1 = launch(url, "-n", "job1", task)
    eventually(lambda: status(url, job1) == "RUNNING")
    job2 = launch(url, "-n", "job2", task, "--priority-class", "high-priority")

    def swapped() -> bool:
        # job1 was preempted for job2 (its one recovery) while job2 got in. How long each
        # state lasts depends on the machine's load, so no single moment is required.
        current = jobs(url)
        return current[job1]["recoveries"] == 1 and current[job2]["status"] in (
            "STARTING",
            "RUNNING",
            "SUCCEEDED",
        )

    eventually(swapped, timeout=30)
    eventually(lambda: status(url, job2) == "SUCCEEDED", timeout=30)
    eventually(lambda: status(url, job1) == "SUCCEEDED", timeout=30)
    assert berth("jobs", "logs", str(job1), url=url).stdout.count("step 1") == 2


def test_failures_retry_setup_prechecks_and_cancel(stack: Stack, tmp_path: Path) -> None:
    """A failing program is retried max_restarts_on_errors times then FAILED; a failing
    setup is FAILED_SETUP; an unknown queue is FAILED_PRECHECKS; a cancel is CANCELLED."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    base = "resources:\n  cpus: 1\n  labels:\n    kueue.x-k8s.io/queue-name: user-queue\n"
    (tmp_path / "fail.yaml").write_text(
        base.replace("  cpus: 1\n", "  cpus: 1\n  job_recovery:\n    max_restarts_on_errors: 1\n")
        + "run: echo trying; exit 3\n"
    )
    (tmp_path / "setup.yaml").write_text(base + "setup: exit 1\nrun: echo never\n")
    (tmp_path / "sleep.yaml").write_text(base + "run: sleep 600\n")
    (tmp_path / "lost.yaml").write_text(
        base.replace("user-queue", "no-such-queue") + "run: echo lost\n"
    )
    failing = launch(url, str(tmp_path / "fail.yaml"))
    setup = launch(url, str(tmp_path / "setup.yaml"))
    sleeper = launch(url, str(tmp_path / "sleep.yaml"))
    lost = berth("jobs", "launch", str(tmp_path / "lost.yaml"), url=url, check=False)
    assert lost.returncode != 0 and "FAILED_PRECHECKS" in lost.stderr
    assert "LocalQueue 'no-such-queue' not found" in lost.stderr

    eventually(lambda: status(url, failing) == "FAILED", timeout=30)
    eventually(lambda: status(url, setup) == "FAILED_SETUP", timeout=30)
    final = jobs(url)
    assert final[failing]["recoveries"] == 1 and len(final[failing]["attempts"]) == 2
    assert berth("jobs", "logs", str(failing), url=url).stdout.count("trying") == 2

    eventually(lambda: status(url, sleeper) == "RUNNING")
    berth("jobs", "cancel", str(sleeper), url=url)
    eventually(lambda: status(url, sleeper) == "CANCELLED", timeout=30)
    again = berth("jobs", "cancel", str(sleeper), url=url, check=False)
    assert again.returncode != 0 and "already CANCELLED" in again.stderr


def test_jobs_survive_service_and_nats_restarts(stack: Stack, stack_pool: StackPool) -> None:
    """A killed recovery process loses nothing; after the whole stack (NATS included)
    restarts, ids, statuses and history are still there and new ids continue."""
    first = stack
    url = first.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    task = str(SEED_002 / "sky-kueue-task.yaml")
    done = launch(url, "-n", "done", task)
    eventually(lambda: status(url, done) == "SUCCEEDED", timeout=30)
    running = launch(url, "-n", "running", task)
    eventually(lambda: status(url, running) == "RUNNING")
    os.kill(first.pids["recovery"], signal.SIGKILL)
    # Only recovery writes a job's status: SUCCEEDED is the restarted one's (`berth up`
    # restarts it after 1 s), from the finish it found in the stream.
    eventually(lambda: status(url, running) == "SUCCEEDED", timeout=30)
    before = jobs(url)
    assert first.stop() == 0
    stack_pool.settle()  # no two `berth up` start at once (tests/stack_pool.py)
    second = start_stack(first.data_dir)
    try:
        url = second.url
        after = jobs(url)
        assert {i: (j["status"], j["recoveries"], len(j["history"])) for i, j in after.items()} == {
            i: (j["status"], j["recoveries"], len(j["history"])) for i, j in before.items()
        }
        third = launch(url, "-n", "third", str(SEED_002 / "sky-kueue-task.yaml"))
        assert third == max(before) + 1
    finally:
        stack_pool.release(second)  # stopped in the background
