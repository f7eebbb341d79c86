"""Issue 15: a finish stored in the status bucket but never reported must not hold quota.

A watcher killed after its terminal status write landed and before its ``WorkloadFinished``
report was stored (the report refused while a NATS cluster elected the events stream's
leader, then SIGKILL) left a Job that looked finished to every later watcher, which then
ignored it: admission never heard of the finish and held its quota for good (found by
tests/test_e2e_chaos.py). The rule now: a terminal status is written only after its report
is stored, marked ``reported``; at start, the watcher reports again every terminal status
without the mark (services/watcher/local/finishes.py). Both halves are reproduced here
deterministically: in-process on a real nats-server, and end to end on `berth up` with the
watcher frozen (SIGSTOP) while the gap is written, then killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench.eventlog import read_events
from services.watcher.local.backend import LocalBackend
from shared.bus import OBJECTS_BUCKET, STATUS_BUCKET, Bus
from shared.events import WorkloadFinished, WorkloadRef
from shared.service import Runtime
from shared.workloads import workload_key
from tests.conftest import FIXTURES, Stack, berth, bus_auth, frozen
from tests.e2e import (
    condition,
    event_log,
    eventually,
    get_json,
    is_admitted,
    job_manifest,
    objects_status,
    peak_usage,
    submit_manifest,
)

# --- in-process: the watcher's start reports what its predecessor left unreported ------------


def _job(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "creationTimestamp": "2025-01-01T00:00:00+00:00",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {"template": {"spec": {"containers": [{"name": "c", "command": ["true"]}]}}},
    }


# name, stored status (besides uid), the Finished expected at start (succeeded, exit code), why
LEFT_BEHIND: list[tuple[str, dict[str, Any], tuple[bool, int | None] | None, str]] = [
    (
        "done",
        {"phase": "Succeeded", "generation": 1, "exitCode": 0, "pids": []},
        (True, 0),
        "the gap: a success stored, its report lost with the watcher",
    ),
    (
        "broke",
        {"phase": "Failed", "generation": 2, "exitCode": 3, "pids": [], "message": "pod c-0"},
        (False, 3),
        "a failure as well, with its exit code and generation",
    ),
    (
        "known",
        {"phase": "Succeeded", "generation": 1, "exitCode": 0, "pids": [], "reported": True},
        None,
        "marked reported: stored after its report was, so not reported again",
    ),
    (
        "gone",
        {"phase": "Evicted", "generation": 1, "pids": [], "reason": "Preempted"},
        None,
        "an eviction is no finish (its report is stored before its status too)",
    ),
]


@pytest.fixture
def bus(watcher_bus: Bus) -> Bus:
    return watcher_bus


async def _start_and_stop_watcher(bus: Bus, data_dir: Path) -> None:
    """Run a local backend until it is ready (its start's reports are stored by then), then
    stop it."""
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(data_dir))
    backend = LocalBackend(runtime, stop_grace=1)
    task = asyncio.create_task(backend.run())
    async with asyncio.timeout(20):
        await asyncio.wait(
            {task, asyncio.create_task(runtime.ready.wait())}, return_when="FIRST_COMPLETED"
        )
    assert runtime.ready.is_set(), task.exception() if task.done() else "not ready"
    runtime.stopping.set()
    bus.interrupt_waits()
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)
    await runtime.cancel_tasks(grace=1)


async def _finishes(url: str) -> list[WorkloadFinished]:
    events = await read_events(url, auth=bus_auth(url))
    return [e for e in events if isinstance(e, WorkloadFinished)]


async def test_a_watcher_start_reports_each_terminal_status_left_unreported(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    objects = await bus.kv(OBJECTS_BUCKET)
    statuses = await bus.kv(STATUS_BUCKET)
    for name, status, _, _ in LEFT_BEHIND:
        key = workload_key("default", name)
        await objects.put(key, msgspec.json.encode(_job(name, uid=f"u-{name}")))
        await statuses.put(key, msgspec.json.encode({"uid": f"u-{name}", **status}))
    assert await _finishes(nats_url) == []  # no fact on the stream: the gap

    await _start_and_stop_watcher(bus, tmp_path / "data")

    finished = {e.workload.name: e for e in await _finishes(nats_url)}
    for name, status, expected, why in LEFT_BEHIND:
        event = finished.pop(name, None)
        if expected is None:
            assert event is None, why
            continue
        assert event is not None, why
        assert (event.succeeded, event.exit_code) == expected, why
        assert event.generation == status["generation"], why
        assert event.workload == WorkloadRef("default", name, f"u-{name}"), why
        stored = await statuses.get(workload_key("default", name))
        assert stored.value is not None
        assert msgspec.json.decode(stored.value)["reported"] is True, why  # once, not each start
    assert finished == {}, f"reported, but not left behind: {sorted(finished)}"

    # The next start finds every finish marked reported: nothing is reported again.
    before = len(await _finishes(nats_url))
    await _start_and_stop_watcher(bus, tmp_path / "data")
    assert len(await _finishes(nats_url)) == before


# --- end to end: the quota comes back, and a duplicate finish frees nothing more ---------------


def _by_name(url: str) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in get_json(url, "workloads")}


def _cluster_queue(url: str) -> dict[str, int]:
    [queue] = get_json(url, "clusterqueues")
    status = queue["status"]
    return {k: status[k] for k in ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads")}


def _pending_for_quota(workload: dict[str, Any]) -> bool:
    reserved = condition(workload, "QuotaReserved")
    assert reserved is not None and reserved["status"] == "False", reserved
    assert "insufficient unused quota for nvidia.com/gpu" in reserved["message"], reserved
    return True


def _running_status(url: str, name: str) -> dict[str, Any] | None:
    status = objects_status(url, "default", name)
    return status if status.get("phase") == "Running" and status.get("pids") else None


def _put_status(url: str, name: str, status: dict[str, Any]) -> None:
    async def put() -> None:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            kv = await bus.kv(STATUS_BUCKET)
            await kv.put(workload_key("default", name), msgspec.json.encode(status))
        finally:
            await bus.close()

    asyncio.run(put())


def _publish(url: str, event: WorkloadFinished) -> None:
    async def publish() -> None:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            await bus.publish(event)
        finally:
            await bus.close()

    asyncio.run(publish())


@pytest.mark.timeout(240)
def test_a_finish_the_killed_watcher_never_reported_frees_its_quota_once(
    stack: Stack, tmp_path: Path
) -> None:
    """One GPU of quota: ``holder`` runs, ``waiter`` waits. The watcher is frozen; its job's
    process ends and the status bucket says Succeeded (as the dead watcher's status write
    would), with no Finished on the stream; then the watcher is killed. The next one must
    report the finish: the quota frees up and ``waiter`` is admitted. A second Finished of
    the same run (another id) must free nothing more: ``third`` stays pending."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    flag = tmp_path / "holder.done"
    loop = f"while [ ! -e {flag} ]; do sleep 0.05; done"
    holder = job_manifest("holder", cpu="500m", gpu=1, command=["sh", "-c", loop])
    submit_manifest(url, tmp_path, holder)
    eventually(lambda: is_admitted(_by_name(url)["holder"]), timeout=60)
    running = eventually(lambda: _running_status(url, "holder"), timeout=30)
    never = f"while [ ! -e {tmp_path / 'never'} ]; do sleep 0.05; done"  # runs till the end
    waiter = job_manifest("waiter", cpu="500m", gpu=1, command=["sh", "-c", never])
    submit_manifest(url, tmp_path, waiter)
    eventually(lambda: _pending_for_quota(_by_name(url)["waiter"]), timeout=30)

    watcher = stack.pids["watcher"]
    frozen(watcher)  # it sees nothing from here on
    try:
        flag.touch()  # the job's process ends...
        eventually(lambda: not any(_alive(pid) for pid in running["pids"]), timeout=30)
        # ...and its terminal status is stored, the report is not: the gap.
        finished = {**running, "phase": "Succeeded", "exitCode": 0, "pids": []}
        _put_status(url, "holder", finished)
    finally:
        os.kill(watcher, signal.SIGKILL)  # `berth up` starts another
    assert not [e for e in event_log(url) if isinstance(e, WorkloadFinished)]

    def waiter_admitted() -> bool:
        workloads = _by_name(url)
        done = condition(workloads["holder"], "Finished")
        assert done is not None and done["reason"] == "Succeeded", done
        assert [n for n, w in workloads.items() if is_admitted(w)] == ["waiter"]
        return True

    eventually(waiter_admitted, timeout=90)
    [report] = [e for e in event_log(url) if isinstance(e, WorkloadFinished)]
    assert report.workload.name == "holder" and report.generation == 1

    # A duplicate of that finish (a later watcher's copy: another id) frees nothing more.
    _publish(url, msgspec.structs.replace(report, id=f"{report.id}-again", term=0))
    third = job_manifest("third", cpu="500m", gpu=1, command=["true"])
    submit_manifest(url, tmp_path, third)  # after the duplicate in the stream
    eventually(lambda: _pending_for_quota(_by_name(url)["third"]), timeout=30)
    assert [n for n, w in _by_name(url).items() if is_admitted(w)] == ["waiter"]
    assert _cluster_queue(url) == {
        "pendingWorkloads": 1,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
    }
    events = event_log(url)
    assert len([e for e in events if isinstance(e, WorkloadFinished)]) >= 2  # the duplicate too
    assert peak_usage(events)[("cluster-queue", "default-flavor", "nvidia.com/gpu")] == 1000


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
