"""`berth stop` / `berth resume` patch a queue's stopPolicy as kueuectl does
(berth_cli/stopping.py); admission honours it (tests/test_scheduler.py)."""

from __future__ import annotations

import asyncio

import pytest

from shared.bus import CONFIG_BUCKET, Bus
from shared.config import ClusterQueue, LocalQueue, decode_object
from shared.queue_stop import queue_key, stop_policy_for
from tests.conftest import FIXTURES, berth


def _stop_policy(url: str, key: str) -> str:
    async def read() -> str:
        bus = await Bus.connect(url, source="test")
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
        (["stop", "workload", "w"], "give clusterqueue (cq) or localqueue (lq)"),
    ],
    ids=["an unknown queue", "a LocalQueue of another namespace", "not a queue"],
)
def test_stop_refuses_what_it_cannot_stop(nats_url: str, args: list[str], message: str) -> None:
    """One line naming what was not found or not stoppable; nothing written."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=nats_url)
    result = berth(*args, url=nats_url, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
