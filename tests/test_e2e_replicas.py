"""Standby replicas end to end: real processes, a real kill -9, the event log audited.

`berth up` runs one replica of each service; each test starts the extra replicas itself (as
`python -m services.<role>` with their own replica id and HTTP port) and finds who is active
from `berth status -o json`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench.eventlog import read_events
from shared.bus import Bus
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    LeaderElected,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadStarted,
)
from shared.fencing import fenced_log
from shared.lease import LEASE_BUCKET, LeaseRecord
from shared.service import LEASE_LOST_EXIT
from tests.conftest import FIXTURES, REPO, Stack, berth, bus_auth
from tests.e2e import eventually, get_json, job_manifest, peak_usage, submit_manifest

CPU = 1000  # milli-units
# How long a takeover takes is printed here and measured against its target (5 s) by
# bench/failover.py (`make bench-failover`): a timed assertion failed on a loaded machine.
ROLES = ("watcher", "admission", "preemption", "recovery")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Replica:
    """One extra service process, as a second pod of its Deployment would be."""

    def __init__(self, stack: Stack, role: str, replica: str) -> None:
        self.role = role
        self.replica = replica
        env = {
            **os.environ,
            "BERTH_NATS_URL": stack.url,
            "BERTH_HTTP_HOST": "127.0.0.1",
            "BERTH_HTTP_PORT": str(_free_port()),
            "BERTH_REPLICA_ID": replica,
            "BERTH_DATA_DIR": str(stack.data_dir),
            "BERTH_POD_GRACE_SECONDS": "2",
            "BERTH_GRACE_SECONDS": "5",
        }
        env.pop("BERTH_CREDS", None)
        credentials = stack.credentials(role)
        if credentials is not None:
            env["BERTH_CREDS"] = str(credentials)
        self.log_path = stack.data_dir / "logs" / f"{replica}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", f"services.{role}"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    try:
        yield started
    finally:
        for replica in started:
            replica.stop()


def members(url: str, role: str) -> list[dict[str, Any]]:
    body = json.loads(berth("status", "-o", "json", url=url).stdout)
    return [m for m in body["replicas"] if m["role"] == role]


def leader(url: str, role: str, *, not_pid: int = 0) -> dict[str, Any]:
    """The one live, active replica of ``role`` (waiting until there is exactly one)."""

    def one() -> dict[str, Any]:
        live = [m for m in members(url, role) if m["active"] and m["health"] != "lost"]
        assert len(live) == 1 and live[0]["pid"] != not_pid, live
        return live[0]

    found: dict[str, Any] = eventually(one, timeout=30, interval=0.1)
    return found


def lead_with(url: str, role: str, replica: str) -> tuple[dict[str, Any], str]:
    """Make ``replica`` (one of ours, which nobody restarts) the leader, with `berth up`'s
    replica as its warm standby: if `berth up`'s leads, a SIGTERM hands over. Returns the
    leader and the handover time (from the signal to the successor's marker), if any."""
    eventually(functools.partial(_both_ready, url, role), timeout=30)
    current = leader(url, role)
    if current["replica"] == replica:
        return current, "(none needed)"
    stopped_at = time.time()
    os.kill(current["pid"], signal.SIGTERM)
    successor = leader(url, role, not_pid=current["pid"])
    assert successor["replica"] == replica and successor["term"] == current["term"] + 1
    seconds = _marker_seconds(url, role, term=successor["term"], killed_at=stopped_at)
    eventually(functools.partial(_both_ready, url, role), timeout=30)  # restarted, standing by
    return successor, f"{seconds:.2f}"


def events(url: str) -> list[AnyEvent]:
    return asyncio.run(read_events(url, auth=bus_auth(url)))


def admitted(url: str, name: str) -> list[WorkloadAdmitted]:
    """The admissions of workload ``name`` that stand (the fence applied, as services do)."""
    return [
        e
        for e in fenced_log(events(url))
        if isinstance(e, WorkloadAdmitted) and e.workload.name == name
    ]


def wait_admitted(url: str, name: str, *, timeout: float = 20) -> list[WorkloadAdmitted]:
    def check() -> list[WorkloadAdmitted]:
        found = admitted(url, name)
        seen = [
            (type(e).__name__, e.source, e.term) for e in events(url) if e.workload.name == name
        ]
        assert found, f"{name} not admitted; its events: {seen}"
        return found

    result: list[WorkloadAdmitted] = eventually(check, timeout=timeout, interval=0.1)
    return result


def submit(url: str, folder: Path, name: str, cpu: int = 1) -> None:
    submit_manifest(url, folder, job_manifest(name, cpu=cpu, simulated_runtime="600s"))


def takeover_seconds(url: str, name: str, killed_at: float) -> float:
    """From the kill to the admission of ``name``, by the admission's own timestamp."""
    [admission] = wait_admitted(url, name, timeout=30)
    return float(admission.time.timestamp() - killed_at)


def test_a_standby_admission_takes_over_from_a_killed_leader(
    stack: Stack, replicas: list[Replica], tmp_path: Path
) -> None:
    """Two admission replicas: a clean stop hands over at once; a kill -9 of the leader is
    taken over by the warm standby, which admits a workload submitted after the kill, and
    nothing is ever admitted twice or over quota."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    replicas.append(Replica(stack, "admission", "admission-b"))
    submit(url, tmp_path, "w1")
    [w1] = wait_admitted(url, "w1")

    # Our replica leads, `berth up`'s stands by: the one we kill is not restarted under it.
    second, handover = lead_with(url, "admission", "admission-b")
    submit(url, tmp_path, "w2")
    [w2] = wait_admitted(url, "w2")
    assert w2.term == second["term"]

    killed_at = time.time()
    os.kill(second["pid"], signal.SIGKILL)
    submit(url, tmp_path, "w3")
    took = takeover_seconds(url, "w3", killed_at)
    third = leader(url, "admission", not_pid=second["pid"])
    print(f"admission: clean handover {handover}s, kill -9 to next admission {took:.2f}s")
    assert third["replica"] != "admission-b" and third["term"] == second["term"] + 1
    assert admitted(url, "w3")[0].term == third["term"]
    eventually(functools.partial(_is_lost, url, "admission", "admission-b"))

    log = events(url)
    markers = [e.term for e in log if isinstance(e, LeaderElected) and e.role == "admission"]
    # One marker per term, none skipped or repeated, from the first leader's (which admitted
    # w1) to the last leader's. The first need not be term 1: a first create that timed out
    # but landed is taken again with term 2.
    assert markers and markers[0] == w1.term, (markers, w1.term)
    assert markers == list(range(w1.term, third["term"] + 1)), markers
    standing = fenced_log(log)
    per_workload = [e.workload.name for e in standing if isinstance(e, WorkloadAdmitted)]
    assert sorted(per_workload) == ["w1", "w2", "w3"]  # each admitted once
    assert peak_usage(standing)[("cluster-queue", "default-flavor", "cpu")] == 3 * CPU


def test_a_standby_admission_rests_between_events(
    stack: Stack, replicas: list[Replica], tmp_path: Path
) -> None:
    """A standby folds what comes and decides nothing: between events it waits, whatever it
    folded (a standby that took events as a pass owed spun a whole core)."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    replicas.append(Replica(stack, "admission", "admission-b"))
    eventually(functools.partial(_both_ready, url, "admission"), timeout=30)
    standby = next(m for m in members(url, "admission") if not m["active"])
    for name in ("rest-1", "rest-2"):
        submit(url, tmp_path, name)
        wait_admitted(url, name)
    time.sleep(0.5)  # the standby has folded them
    before = _cpu_seconds(standby["pid"])
    time.sleep(3.0)
    spent = _cpu_seconds(standby["pid"]) - before
    assert spent < 1.0, f"the standby used {spent:.2f} s of CPU in 3 s with nothing to fold"


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_deposed_leaders_late_decision_is_ignored(stack: Stack, tmp_path: Path) -> None:
    """After a new admission leader's marker, a decision stamped with the old term (a
    deposed leader waking up) is void for admission's fold and for the watcher alike: the
    workload stays pending, nothing starts it, and the watcher counts it as fenced.
    (Admission's deciding leader is not even sent admissions, only admission publishes
    them: docs/events.md; a new leader still folding up to its marker is, and fences it.)"""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    submit(url, tmp_path, "blocker", cpu=9)
    wait_admitted(url, "blocker")
    submit(url, tmp_path, "waiting", cpu=9)
    waiting = eventually(lambda: _pending(url, "waiting"))
    first = leader(url, "admission")
    os.kill(first["pid"], signal.SIGTERM)  # `berth up` restarts it: a new leader, a new term
    assert leader(url, "admission", not_pid=first["pid"])["term"] == first["term"] + 1

    forged = WorkloadAdmitted(
        id=f"admitted-{waiting['metadata']['uid']}-1",
        source="admission",
        workload=_ref(waiting),
        cluster_queue="cluster-queue",
        local_queue="user-queue",
        priority=0,
        assignments=[
            FlavorAssignment("main", 1, {"cpu": "default-flavor"}, {"cpu": 9 * CPU}),
        ],
        generation=1,
    )
    asyncio.run(_publish_as_deposed_leader(url, forged, term=first["term"]))

    def counted_by_the_watcher() -> bool:
        metrics = _metrics(leader(url, "watcher")["http"])
        assert 'berth_fenced_events_total{source="admission"} 1.0' in metrics
        return True

    eventually(counted_by_the_watcher)
    assert _pending(url, "waiting")  # admission's view: still waiting
    log = events(url)
    assert not [e for e in log if isinstance(e, WorkloadStarted) and e.workload.name == "waiting"]
    # The raw log holds the forged admission; the fenced view is what every service saw.
    assert peak_usage(fenced_log(log))[("cluster-queue", "default-flavor", "cpu")] == 9 * CPU
    assert any(isinstance(e, WorkloadAdmitted) and e.term == first["term"] for e in log[-3:])


def test_a_service_whose_lease_is_taken_exits_at_once(nats_url: str, tmp_path: Path) -> None:
    """A replica that finds its lease taken (its renewal's compare-and-swap lost) logs
    ``lease_lost`` and exits with 75 without waiting for anything, so a supervisor restarts
    it as a standby."""
    env = {
        **os.environ,
        "BERTH_NATS_URL": nats_url,
        "BERTH_HTTP_PORT": str(_free_port()),
        "BERTH_REPLICA_ID": "preemption-a",
        "BERTH_DATA_DIR": str(tmp_path),
    }
    env.pop("BERTH_CREDS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "services.preemption"],
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        status_url = f"http://127.0.0.1:{env['BERTH_HTTP_PORT']}/status"
        eventually(lambda: _get_json(status_url).get("active"))
        asyncio.run(_take_lease(nats_url, "preemption"))
        taken_at = time.monotonic()
        assert process.wait(10) == LEASE_LOST_EXIT
        assert time.monotonic() - taken_at < 3.0
        assert process.stderr is not None
        assert b'"event":"lease_lost"' in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_every_role_hands_over_and_takes_over(
    stack: Stack, replicas: list[Replica], tmp_path: Path
) -> None:
    """Every role gets a second replica, to which `berth up`'s hands over (a SIGTERM) and
    then stands by; a kill -9 of all four leaders at once is taken over by the four standbys,
    and what needs each role follows: a workload submitted after the kill is admitted (watcher
    and admission), preemption's new leader announces itself, a managed job is launched and
    admitted (recovery). Nothing is admitted twice."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    for role in ROLES:
        replicas.append(Replica(stack, role, f"{role}-b"))
    for role in ROLES:
        eventually(functools.partial(_both_ready, url, role), timeout=30)
    handing_over = [leader(url, role) for role in ROLES]
    for current in handing_over:
        if not current["replica"].endswith("-b"):
            os.kill(current["pid"], signal.SIGTERM)
    leaders = [
        current
        if current["replica"].endswith("-b")
        else leader(url, current["role"], not_pid=current["pid"])
        for current in handing_over
    ]
    for current, successor in zip(handing_over, leaders, strict=True):
        assert successor["replica"] == f"{current['role']}-b", successor
        assert successor["term"] in (current["term"], current["term"] + 1), successor
    for role in ROLES:
        eventually(functools.partial(_both_ready, url, role), timeout=30)  # standing by

    killed_at = time.time()
    for current in leaders:
        os.kill(current["pid"], signal.SIGKILL)
    submit(url, tmp_path, "after-kill")
    admitted_s = takeover_seconds(url, "after-kill", killed_at)
    measured = {
        "watcher": admitted_s,
        "admission": admitted_s,
        "preemption": _marker_seconds(
            url,
            "preemption",
            term=leaders[ROLES.index("preemption")]["term"] + 1,
            killed_at=killed_at,
        ),
        "recovery": _launch_seconds(url, tmp_path, killed_at),
    }
    for killed in leaders:
        assert leader(url, killed["role"], not_pid=killed["pid"])["term"] == killed["term"] + 1
    print("kill -9 of every active replica at once -> next admission (preemption: its marker):")
    for role, seconds in measured.items():
        print(f"  {role:<11} {seconds:.2f}s")
    standing = fenced_log(events(url))
    names = [e.workload.name for e in standing if isinstance(e, WorkloadAdmitted)]
    assert len(names) == len(set(names))  # none admitted twice


# --- helpers --------------------------------------------------------------------------------


def _ref(workload: dict[str, Any]) -> WorkloadRef:
    metadata = workload["metadata"]
    return WorkloadRef(metadata["namespace"], metadata["name"], metadata["uid"])


def _is_lost(url: str, role: str, replica: str) -> bool:
    record = next(m for m in members(url, role) if m["replica"] == replica)
    assert record["health"] == "lost", record
    return True


def _ready_count(url: str, role: str) -> int:
    return len([m for m in members(url, role) if m["health"] == "ready"])


def _both_ready(url: str, role: str) -> bool:
    return _ready_count(url, role) == 2


def _pending(url: str, name: str) -> dict[str, Any] | None:
    for workload in get_json(url, "workloads"):
        if workload["metadata"]["name"] == name:
            conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
            if conditions.get("QuotaReserved") == "False" and not workload["status"].get(
                "admission"
            ):
                return dict(workload)
    return None


async def _publish_as_deposed_leader(url: str, event: WorkloadAdmitted, *, term: int) -> None:
    bus = await Bus.connect(url, source="admission", auth=bus_auth(url))
    try:
        bus.term = term  # what a paused leader's bus still holds
        await bus.publish(event)
    finally:
        await bus.close()


async def _take_lease(url: str, role: str) -> None:
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    try:
        kv = await bus.kv(LEASE_BUCKET)
        taken = LeaseRecord(f"{role}-x", 9, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
        await kv.put(role, msgspec.json.encode(taken))
    finally:
        await bus.close()


def _get_json(address: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(address, timeout=2) as response:
            return dict(json.loads(response.read()))
    except OSError:  # not listening yet
        return {}


def _metrics(http: str) -> str:
    with urllib.request.urlopen(f"{http}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _marker_seconds(url: str, role: str, *, term: int, killed_at: float) -> float:
    def marker() -> LeaderElected | None:
        for event in events(url):
            if isinstance(event, LeaderElected) and (event.role, event.term) == (role, term):
                return event
        return None

    found: LeaderElected = eventually(marker, timeout=30, interval=0.1)
    return found.time.timestamp() - killed_at


def _launch_seconds(url: str, folder: Path, killed_at: float) -> float:
    """`berth jobs launch` until the new recovery leader answers, then its admission."""
    task = folder / "task.yaml"
    task.write_text(
        "resources:\n  cpus: 1\n  labels:\n    kueue.x-k8s.io/queue-name: user-queue\n"
        "run: sleep 600\n"
    )

    def launched() -> bool:
        result = berth("jobs", "launch", "-n", "after-recovery", str(task), url=url, check=False)
        return result.returncode == 0

    eventually(launched, timeout=30, interval=0.1)

    def job_admitted() -> list[WorkloadAdmitted]:
        return [
            e
            for e in fenced_log(events(url))
            if isinstance(e, WorkloadAdmitted) and e.workload.name.startswith("after-recovery")
        ]

    [admission] = eventually(job_admitted, timeout=30, interval=0.1)
    return float(admission.time.timestamp() - killed_at)
