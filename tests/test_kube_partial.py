"""A partially admitted Job runs the admitted count at a time (spec.parallelism, as Kueue
sets it) and gets its own parallelism back at eviction (services/watcher/kube/patching.py)."""

from __future__ import annotations

from typing import Any

import pytest

from services.watcher.kube.patching import PARALLELISM_ANNOTATION, admit_plan, evict_plan
from shared.events import FlavorAssignment
from tests.test_kube_kinds import converge_locally


def _job(
    parallelism: int, completions: int | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "suspend": True,
        "parallelism": parallelism,
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    }
    if completions is not None:
        spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "annotations": annotations or {}},
        "spec": spec,
    }


def _admitted(count: int) -> FlavorAssignment:
    return FlavorAssignment(pod_set="main", count=count, flavors={"cpu": "f"}, usage={})


CASES: list[tuple[str, dict[str, Any], int, int, str | None]] = [
    ("admitted with fewer pods: parallelism is the count", _job(6), 4, 4, "6"),
    ("admitted whole: parallelism untouched", _job(6), 6, 6, None),
    ("completions below parallelism bound the pods asked for", _job(10, 4), 4, 10, None),
    (
        "an earlier partial run whose restore never ran: its kept value is the Job's own",
        _job(3, annotations={PARALLELISM_ANNOTATION: "6"}),
        6,
        6,
        None,
    ),
]


@pytest.mark.parametrize(
    ("reason", "job", "count", "parallelism", "kept"), CASES, ids=[c[0] for c in CASES]
)
def test_admission_sets_parallelism(
    reason: str, job: dict[str, Any], count: int, parallelism: int, kept: str | None
) -> None:
    """Admission writes the admitted count, and remembers the Job's own value only then."""
    admitted = converge_locally(job, admit_plan(1, [_admitted(count)]))
    assert admitted is not None
    assert admitted["spec"]["suspend"] is False, reason
    assert admitted["spec"]["parallelism"] == parallelism, reason
    assert admitted["metadata"].get("annotations", {}).get(PARALLELISM_ANNOTATION) == kept, reason


def test_eviction_restores_the_jobs_own_parallelism() -> None:
    """Suspended again, the Job asks for its 6 pods, as before admission."""
    admitted = converge_locally(_job(6), admit_plan(1, [_admitted(4)]))
    assert admitted is not None
    evicted = converge_locally(admitted, evict_plan(1))
    assert evicted is not None
    assert evicted["spec"]["suspend"] is True
    assert evicted["spec"]["parallelism"] == 6
    assert PARALLELISM_ANNOTATION not in evicted["metadata"].get("annotations", {})
