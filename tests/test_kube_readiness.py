"""The Kubernetes backend's PodsReady (services/watcher/kube/readiness.py): Kueue's rule per
kind, and the fact reported once a Job's pods are ready (kmock as the API server)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import msgspec
import pytest

from services.watcher.kube.readiness import group_ready, pods_ready
from shared.events import (
    AnyEvent,
    WorkloadFinished,
    WorkloadPodsReady,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
)
from shared.workload_kinds import KINDS
from tests.pods_ready_facts import enable_pods_ready
from tests.test_kube_backend import (  # noqa: F401 - harness is a fixture
    JOBS_KEY,
    PODS_KEY,
    REF,
    Harness,
    admitted_job,
    harness,
    labelled_job,
    start,
    stop,
)
from tests.test_kube_kinds import _admitted, _member, assignment


def _job(parallelism: int | None, completions: int | None, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"spec": spec, "status": status}


def _pod(ready: str | None, group: bool = False) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/pod-group-name": "g"} if group else {}
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"labels": labels}, "status": {"conditions": conditions}}


def _jobset(replicas: list[int | None], statuses: list[tuple[int, int]]) -> dict[str, Any]:
    jobs = [{} if r is None else {"replicas": r} for r in replicas]
    status = [{"ready": ready, "succeeded": done} for ready, done in statuses]
    return {"spec": {"replicatedJobs": jobs}, "status": {"replicatedJobsStatus": status}}


def _conditioned(kind: str, value: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": kind, "status": value}]}}


def _replicated(replicas: int | None, ready: int) -> dict[str, Any]:
    spec = {} if replicas is None else {"replicas": replicas}
    return {"spec": spec, "status": {"readyReplicas": ready}}


RULES: list[tuple[str, dict[str, Any], bool | None, str]] = [
    ("Job", _job(3, None, ready=2), False, "2 of 3 parallel pods ready"),
    ("Job", _job(3, None, ready=3), True, "all parallel pods ready"),
    ("Job", _job(3, None, ready=1, succeeded=2), True, "succeeded pods count as ready"),
    ("Job", _job(4, 2, ready=2), True, "completions smaller than parallelism: the count"),
    (
        "Job",
        _job(2, None, ready=1, uncountedTerminatedPods={"succeeded": ["a"]}),
        True,
        "succeeded pods not yet counted count too (Kueue's uncountedTerminatedPods)",
    ),
    ("Job", _job(None, None), False, "parallelism defaults to 1: nothing ready yet"),
    ("Pod", _pod("True"), True, "a pod's Ready condition"),
    ("Pod", _pod("False"), False, "not ready"),
    ("Pod", _pod(None), False, "no condition yet"),
    ("Pod", _pod("True", group=True), None, "a pod of a group: its group decides"),
    ("JobSet", _jobset([2, None], [(1, 1), (0, 0)]), False, "2 of 3 replicated jobs ready"),
    (
        "JobSet",
        _jobset([2, None], [(1, 1), (1, 0)]),
        True,
        "ready + succeeded jobs equal the replicas (a missing replicas is 1)",
    ),
    ("JobSet", _jobset([1], []), False, "no status yet"),
    ("RayJob", {"status": {"rayClusterStatus": {"state": "ready"}}}, True, "its cluster ready"),
    ("RayJob", {"status": {"jobDeploymentStatus": "Running"}}, False, "no cluster state yet"),
    ("RayCluster", {"status": {"state": "ready"}}, True, "a RayCluster's own state"),
    ("RayCluster", {"status": {"state": "suspended"}}, False, "suspended: not ready"),
    ("PyTorchJob", _conditioned("Running", "True"), True, "the training operator's Running"),
    ("MPIJob", _conditioned("Running", "False"), False, "Running False: not ready"),
    ("TFJob", _conditioned("Created", "True"), False, "only created"),
    ("AppWrapper", _conditioned("PodsReady", "True"), True, "AppWrapper's PodsReady condition"),
    ("Deployment", _replicated(2, 2), True, "every replica ready"),
    ("StatefulSet", _replicated(3, 2), False, "2 of 3 replicas ready: lost or not yet"),
    ("LeaderWorkerSet", _replicated(None, 1), True, "replicas default to 1 (ready groups)"),
    ("Widget", {"status": {}}, None, "a kind Berth does not know: cannot tell"),
]


@pytest.mark.parametrize(("kind", "obj", "expected", "why"), RULES, ids=[r[3] for r in RULES])
def test_pods_ready_rule(kind: str, obj: dict[str, Any], expected: bool | None, why: str) -> None:
    """Kueue's PodsReady per job integration."""
    assert pods_ready(kind, obj) is expected, why


async def _started_job(harness: Harness) -> asyncio.Task[None]:  # noqa: F811
    """The test Job, suspended until admitted, then admitted and started."""
    obj = labelled_job()
    obj["spec"]["suspend"] = True
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = obj
    await enable_pods_ready(harness.bus)
    task = await start(harness)
    await harness.bus.publish(admitted_job())
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    return task


async def test_a_job_with_all_pods_ready_is_reported_once(harness: Harness) -> None:  # noqa: F811
    """Admitted, then status.ready reaches the Job's parallelism: PodsReady of generation 1."""
    task = await _started_job(harness)
    await harness.api("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j1", {"status": {"ready": 2}})
    ready = await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady))
    await stop(harness, task)
    assert isinstance(ready, WorkloadPodsReady)
    assert ready.id == "podsready-u1-1" and ready.generation == 1


GROUP: list[tuple[list[str | None], int, bool, str]] = [
    (["True", "True"], 2, True, "every pod of the group Ready"),
    (["True", "False"], 2, False, "one not ready: the group is not"),
    (["True"], 2, False, "a pod of the group missing"),
    (["True", None], 2, False, "no condition yet"),
]


@pytest.mark.parametrize(("states", "total", "expected", "why"), GROUP, ids=[g[3] for g in GROUP])
def test_group_ready(states: list[str | None], total: int, expected: bool, why: str) -> None:
    """Kueue's pod group readiness: all its pods exist and are Ready."""
    assert group_ready([_pod(s, group=True) for s in states], total) is expected, why


async def test_a_job_that_loses_a_ready_pod_reports_the_loss_and_the_recovery(
    harness: Harness,  # noqa: F811
) -> None:
    """Ready 2 of 2, then a pod fails (ready 1): PodsReady false with its own id; its
    replacement ready (2): PodsReady true again; each transition reported once."""
    task = await _started_job(harness)
    path = "/apis/batch/v1/namespaces/ns/jobs/j1"
    await harness.api("PATCH", path, {"status": {"ready": 2}})
    await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady))
    await harness.api("PATCH", path, {"status": {"ready": 1, "failed": 1}})
    lost = await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady) and not e.ready)
    await harness.api("PATCH", path, {"status": {"ready": 1, "failed": 1, "active": 2}})
    await harness.api("PATCH", path, {"status": {"ready": 2}})
    back = await harness.wait_for(
        lambda e: isinstance(e, WorkloadPodsReady) and e.ready and e.id != "podsready-u1-1"
    )
    await stop(harness, task)
    assert isinstance(lost, WorkloadPodsReady) and isinstance(back, WorkloadPodsReady)
    assert lost.generation == back.generation == 1 and lost.id != back.id
    facts = [e.ready for e in harness.events if isinstance(e, WorkloadPodsReady)]
    assert facts == [True, False, True], facts


async def test_a_pod_group_is_ready_when_all_its_pods_are(harness: Harness) -> None:  # noqa: F811
    """A pod group (two gated Pods) admitted: PodsReady of the group `g` once both pods are
    Ready; then one stops being Ready: the group's loss of readiness."""
    harness.kmock.objects[PODS_KEY, "ns", "g-0"] = _member("g-0", "1")
    harness.kmock.objects[PODS_KEY, "ns", "g-1"] = _member("g-1", "2")
    await enable_pods_ready(harness.bus)
    task = await start(harness)
    submitted = await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    assert isinstance(submitted, WorkloadSubmitted) and submitted.kind == "PodGroup"
    ref = submitted.workload
    await harness.bus.publish(_admitted(ref, [assignment(p.name) for p in submitted.pod_sets]))
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    for name in ("g-0", "g-1"):  # one of two is not enough (test_group_ready)
        await harness.api("PATCH", f"/api/v1/namespaces/ns/pods/{name}", ready)
    first = await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady))
    assert first.workload.name == "g" and first.id == f"podsready-{ref.uid}-1"
    not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    await harness.api("PATCH", "/api/v1/namespaces/ns/pods/g-1", not_ready)
    lost = await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady) and not e.ready)
    await stop(harness, task)
    assert lost.workload.name == "g"


def test_every_kind_the_backend_admits_has_a_readiness_rule() -> None:
    """A kind added to shared/workload_kinds.py without a rule here fails this test: with
    waitForPodsReady on, it would time out on every admission (never reported ready)."""
    unread = [
        name
        for name, kind in KINDS.items()
        if kind.submittable and pods_ready(name, {"metadata": {}}) is None
    ]
    assert unread == [], unread
    assert "PodGroup" in KINDS and not KINDS["PodGroup"].submittable, "read from its pods"


async def test_turned_on_the_readiness_of_running_jobs_is_sent_not_of_finished_ones(
    harness: Harness,  # noqa: F811
) -> None:
    """waitForPodsReady off: two admitted Jobs become ready, nothing is reported; one
    finishes. Turned on: the running one's readiness is sent (as it stands), the finished
    one's is not (pods_ready_gate.py)."""
    other = labelled_job()
    other["metadata"] = {**other["metadata"], "name": "j2", "uid": "u2"}
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = labelled_job()
    harness.kmock.objects[JOBS_KEY, "ns", "j2"] = other
    task = await start(harness)
    ref2 = WorkloadRef(namespace="ns", name="j2", uid="u2")
    await harness.bus.publish(admitted_job())
    await harness.bus.publish(msgspec.structs.replace(admitted_job(), workload=ref2))
    for name in ("j1", "j2"):
        await harness.wait_for(functools.partial(_started, name=name))
        path = f"/apis/batch/v1/namespaces/ns/jobs/{name}"
        await harness.api("PATCH", path, {"status": {"ready": 2}})
    complete = {"status": {"ready": 0, "conditions": [{"type": "Complete", "status": "True"}]}}
    await harness.api("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j1", complete)
    await harness.wait_for(lambda e: isinstance(e, WorkloadFinished))
    assert not [e for e in harness.events if isinstance(e, WorkloadPodsReady)], "off: none"
    await enable_pods_ready(harness.bus)
    ready = await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady))
    await stop(harness, task)
    assert ready.workload.name == "j2" and ready.id == "podsready-u2-1"
    names = [e.workload.name for e in harness.events if isinstance(e, WorkloadPodsReady)]
    assert names == ["j2"], "the finished Job's readiness is not sent"


def _started(event: AnyEvent, *, name: str) -> bool:
    return isinstance(event, WorkloadStarted) and event.workload.name == name
