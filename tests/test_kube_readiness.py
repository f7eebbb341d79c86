"""The Kubernetes backend's PodsReady (services/watcher/kube/readiness.py): Kueue's rule per
kind, and the fact reported once a Job's pods are ready (kmock as the API server)."""

from __future__ import annotations

from typing import Any

import pytest

from services.watcher.kube.readiness import pods_ready
from shared.events import WorkloadAdmitted, WorkloadPodsReady, WorkloadStarted
from tests.test_kube_backend import (  # noqa: F401 - harness is a fixture
    ASSIGNMENT,
    JOBS_KEY,
    REF,
    Harness,
    harness,
    labelled_job,
    start,
    stop,
)


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
    ("Pod", _pod("True", group=True), None, "a pod group's readiness is not read yet"),
    ("JobSet", {"status": {}}, None, "other kinds: unknown, never reported"),
]


@pytest.mark.parametrize(("kind", "obj", "expected", "why"), RULES, ids=[r[3] for r in RULES])
def test_pods_ready_rule(kind: str, obj: dict[str, Any], expected: bool | None, why: str) -> None:
    """Kueue's PodsReady per job integration."""
    assert pods_ready(kind, obj) is expected, why


async def test_a_job_with_all_pods_ready_is_reported_once(harness: Harness) -> None:  # noqa: F811
    """Admitted, then status.ready reaches the Job's parallelism: PodsReady of generation 1."""
    obj = labelled_job()
    obj["spec"]["suspend"] = True
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = obj
    task = await start(harness)
    await harness.bus.publish(
        WorkloadAdmitted(
            source="admission",
            workload=REF,
            cluster_queue="cq",
            local_queue="team-a",
            priority=0,
            assignments=[ASSIGNMENT],
            generation=1,
        )
    )
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    await harness.api("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j1", {"status": {"ready": 2}})
    ready = await harness.wait_for(lambda e: isinstance(e, WorkloadPodsReady))
    await stop(harness, task)
    assert isinstance(ready, WorkloadPodsReady)
    assert ready.id == "podsready-u1-1" and ready.generation == 1
