"""`berth stop` / `berth resume` patch a queue's stopPolicy as kueuectl does
(berth_cli/stopping.py); admission honours it (tests/test_scheduler_resolution.py,
tests/test_scheduler_lifecycle.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.bus import CONFIG_BUCKET, Bus
from shared.config import ClusterQueue, LocalQueue, decode_object
from shared.queue_stop import queue_key, stop_policy_for
from tests.conftest import FIXTURES, Stack, berth, bus_auth
from tests.e2e import condition, eventually, get_json, is_admitted, job_manifest, submit_manifest


def _stop_policy(url: str, key: str) -> str:
    async def read() -> str:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            entry = await (await bus.kv(CONFIG_BUCKET)).get(key)
            assert entry.value is not None
            obj = decode_object(entry.value)
            assert isinstance(obj, ClusterQueue | LocalQueue)
            return obj.spec.stop_policy
        finally:
            await bus.close()

    return asyncio.run(read())


# (stop, keep already running, the policy written, why)
POLICY_CASES = [
    (True, False, "HoldAndDrain", "kueuectl's stop drains: admitted workloads are evicted"),
    (True, True, "Hold", "--keep-already-running: nothing new, what runs finishes"),
    (False, False, "None", "resume clears the policy"),
    (False, True, "None", "resume ignores the flag: there is nothing to keep"),
]


@pytest.mark.parametrize(
    ("stop", "keep", "policy", "reason"), POLICY_CASES, ids=[c[3] for c in POLICY_CASES]
)
def test_stop_policy_rule(stop: bool, keep: bool, policy: str, reason: str) -> None:
    """The one rule the CLI and the console write (shared/queue_stop.py)."""
    assert stop_policy_for(stop=stop, keep_already_running=keep) == policy, reason


def test_queue_key_refuses_other_kinds() -> None:
    """Only queues have a stopPolicy; a ClusterQueue's key ignores the namespace."""
    assert queue_key("ClusterQueue", "cq", "team-a") == "clusterqueue._.cq"
    assert queue_key("LocalQueue", "lq", "team-a") == "localqueue.team-a.lq"
    with pytest.raises(ValueError, match="only ClusterQueue or LocalQueue"):
        queue_key("ResourceFlavor", "f", "")


CQ_KEY = "clusterqueue._.cluster-queue"
LQ_KEY = "localqueue.default.user-queue"
STEPS: list[tuple[str, list[str], str, str, str]] = [
    (
        "stop drains by default (kueuectl: HoldAndDrain)",
        ["stop", "clusterqueue", "cluster-queue"],
        CQ_KEY,
        "HoldAndDrain",
        "clusterqueue.kueue.x-k8s.io/cluster-queue stopped",
    ),
    (
        "--keep-already-running only holds",
        ["stop", "cq", "cluster-queue", "--keep-already-running"],
        CQ_KEY,
        "Hold",
        "clusterqueue.kueue.x-k8s.io/cluster-queue stopped",
    ),
    (
        "resume clears it",
        ["resume", "clusterqueue", "cluster-queue"],
        CQ_KEY,
        "None",
        "clusterqueue.kueue.x-k8s.io/cluster-queue resumed",
    ),
    (
        "resuming a running queue changes nothing",
        ["resume", "cq", "cluster-queue"],
        CQ_KEY,
        "None",
        "unchanged (stopPolicy None)",
    ),
    (
        "a LocalQueue, in its namespace",
        ["stop", "localqueue", "user-queue", "-n", "default", "--keep-already-running"],
        LQ_KEY,
        "Hold",
        "localqueue.kueue.x-k8s.io/user-queue stopped",
    ),
]


def test_stop_and_resume_patch_the_stop_policy(nats_url: str) -> None:
    """Each step (see the reasons) leaves the stored object with the stopPolicy kueuectl sets."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=nats_url)
    for reason, args, key, policy, output in STEPS:
        result = berth(*args, url=nats_url)
        assert output in result.stdout, (reason, result.stdout)
        assert _stop_policy(nats_url, key) == policy, reason


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stop", "cq", "missing"], "ClusterQueue missing not found"),
        (["stop", "lq", "user-queue", "-n", "other"], "LocalQueue user-queue in namespace other"),
        (["stop", "pod", "w"], "give clusterqueue (cq), localqueue (lq) or workload (wl)"),
    ],
    ids=["an unknown queue", "a LocalQueue of another namespace", "not a queue"],
)
def test_stop_refuses_what_it_cannot_stop(nats_url: str, args: list[str], message: str) -> None:
    """One line naming what was not found or not stoppable; nothing written."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=nats_url)
    result = berth(*args, url=nats_url, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


SETUP = FIXTURES / "seed002-single-clusterqueue-setup.yaml"  # 9 CPUs, one LocalQueue


def soon(check: Callable[[], Any]) -> Any:
    """``eventually`` with room for a loaded machine (a stack's first workload)."""
    return eventually(check, timeout=60)


def _workload(url: str, name: str) -> dict[str, Any]:
    return next(item for item in get_json(url, "workloads") if item["metadata"]["name"] == name)


def _reason(item: dict[str, Any], kind: str) -> str:
    found = condition(item, kind)
    return "" if found is None else f"{found['status']}/{found['reason']}"


def test_stop_and_resume_a_workload(stack: Stack, tmp_path: Path) -> None:
    """Kueue's spec.active (issue 18): a stopped running workload is evicted (Deactivated),
    its quota goes to another, and it is not admitted while inactive even with room for it;
    resumed, it is admitted again."""
    url = stack.url
    berth("apply", "-f", str(SETUP), url=url)
    first_job = job_manifest(
        "first", cpu=6, priority_class="low-priority", simulated_runtime="600s"
    )
    submit_manifest(url, tmp_path, first_job)
    soon(lambda: is_admitted(_workload(url, "first")))
    submit_manifest(url, tmp_path, job_manifest("second", cpu=6, simulated_runtime="600s"))
    soon(lambda: _reason(_workload(url, "second"), "QuotaReserved").startswith("False"))

    result = berth("stop", "workload", "first", url=url)
    assert result.stdout.strip() == "workload.kueue.x-k8s.io/first stopped"
    soon(lambda: is_admitted(_workload(url, "second")))  # the freed quota
    first = soon(
        lambda: (
            w
            if _reason(w := _workload(url, "first"), "QuotaReserved") == "False/Inactive"
            else None
        )
    )
    assert _reason(first, "Evicted") == "True/Deactivated", first["status"]
    assert first["spec"]["active"] is False
    assert first["spec"]["priority"] == 100, "inactive, it keeps its class's priority"
    wide = berth("get", "workloads", "-o", "wide", url=url).stdout
    assert "inactive (spec.active: false)" in wide, wide
    again = berth("stop", "wl", "first", url=url)
    assert again.stdout.strip() == "workload.kueue.x-k8s.io/first unchanged (already inactive)"

    # Room for it, and a later workload admitted in the same pass: it stays out.
    berth("delete", "workload", "second", url=url)
    submit_manifest(url, tmp_path, job_manifest("third", cpu=1, simulated_runtime="600s"))
    soon(lambda: is_admitted(_workload(url, "third")))
    assert not is_admitted(_workload(url, "first")), "an inactive workload was admitted"

    result = berth("resume", "workload", "first", url=url)
    assert result.stdout.strip() == "workload.kueue.x-k8s.io/first resumed"
    first = soon(lambda: w if is_admitted(w := _workload(url, "first")) else None)
    assert first["spec"].get("active", True) is True
    assert _reason(first, "Evicted") == "False/Admitted"


# (command, what its one line must say, why)
BAD_WORKLOAD_INPUTS = [
    (
        ["stop", "workload", "missing"],
        'workload "missing" not found in namespace "default"',
        "an unknown workload",
    ),
    (
        ["resume", "wl", "runner", "-n", "other"],
        'workload "runner" not found in namespace "other"',
        "a workload of that name in another namespace only",
    ),
    (
        ["stop", "workload", "runner", "--keep-already-running"],
        "--keep-already-running applies to queues",
        "a queue's flag: a stopped workload is always evicted",
    ),
]


def test_stop_workload_refuses_bad_inputs(stack: Stack, tmp_path: Path) -> None:
    """Each bad input (see the reasons) exits 1 with one line naming the problem; the
    running workload is untouched."""
    url = stack.url
    berth("apply", "-f", str(SETUP), url=url)
    submit_manifest(url, tmp_path, job_manifest("runner", cpu=1, simulated_runtime="600s"))
    soon(lambda: is_admitted(_workload(url, "runner")))
    for args, message, reason in BAD_WORKLOAD_INPUTS:
        result = berth(*args, url=url, check=False)
        assert result.returncode == 1, (reason, result)
        assert message in result.stderr, (reason, result.stderr)
    runner = _workload(url, "runner")
    assert is_admitted(runner) and runner["spec"].get("active", True) is True
