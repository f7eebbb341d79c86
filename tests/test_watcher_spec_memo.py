"""The local backend's remembered specs (services/watcher/local/spec_memo.py): a spec is
taken from an earlier object only when every input of ``workload_spec`` is the same, never
for a kind whose pod sets depend on more, and never for an object it refuses."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from services.watcher.local.objects import read_workload
from services.watcher.local.spec_memo import MEMO_KINDS, SpecMemo
from shared.workloads import WorkloadSpec, workload_spec

CONTAINER = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}


def _job(name: str = "a", **changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
            "annotations": {"berth.dev/simulated-runtime": "200ms"},
        },
        "spec": {"template": {"spec": {"containers": [CONTAINER], "restartPolicy": "Never"}}},
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = obj
        for part in parents:
            node = node[part]
        node[last] = value
    return obj


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"containers": [CONTAINER]},
    }


def _ray_job(name: str) -> dict[str, Any]:
    head = {"template": {"spec": {"containers": [CONTAINER]}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"rayClusterSpec": {"headGroupSpec": head}},
    }


def _app_wrapper(name: str) -> dict[str, Any]:
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": _job()["spec"]}
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"components": [{"template": job}]},
    }


def _renamed(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """The same object under another identity: name, namespace, uid, creation time."""
    other = copy.deepcopy(obj)
    other["metadata"].update(
        name=name, namespace="team-b", uid=f"uid-{name}", creationTimestamp="2026-02-03T04:05:06Z"
    )
    return other


def _reported(spec: WorkloadSpec) -> tuple[Any, ...]:
    """What a WorkloadSubmitted carries of a spec."""
    return (
        spec.kind,
        spec.pod_sets,
        spec.queue_name,
        spec.priority_class,
        spec.priority_class_name,
        spec.priority,
    )


def _min_parallelism(value: str) -> dict[str, Any]:
    job = _job(spec__parallelism=4)
    job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = value
    return job


# (first object read, second object read, whether the second takes the first's spec, why)
MEMO_CASES = [
    (_job(), _renamed(_job(), "b"), True, "a Job from one template: only its identity differs"),
    (_pod("a"), _renamed(_pod("a"), "b"), True, "a Pod: its spec is the pod itself"),
    (_ray_job("a"), _renamed(_ray_job("a"), "b"), True, "a RayJob: its cluster spec alone"),
    (
        _job(),
        _job("b", spec__template={"spec": {"containers": [{**CONTAINER, "resources": {}}]}}),
        False,
        "another request: other pod sets",
    ),
    (_job(), _job("b", spec__parallelism=3), False, "another pod count"),
    (
        _job(),
        _job("b", metadata__labels={"kueue.x-k8s.io/queue-name": "team-b"}),
        False,
        "another queue label: another queue",
    ),
    (
        _job(),
        _job("b", metadata__annotations={"kueue.x-k8s.io/queue-name": "x"}),
        False,
        "other annotations (one can name the queue)",
    ),
    (
        _min_parallelism("2"),
        _renamed(_min_parallelism("3"), "b"),
        False,
        "another job-min-parallelism annotation: another minimum count",
    ),
    (
        _job(metadata__labels={"a": "1", "kueue.x-k8s.io/queue-name": "team-a"}),
        _job("b", metadata__labels={"kueue.x-k8s.io/queue-name": "team-a", "a": "1"}),
        False,
        "equal labels in another order: read again (a miss costs only the reading)",
    ),
    (
        _app_wrapper("a"),
        _renamed(_app_wrapper("a"), "b"),
        False,
        "an AppWrapper's pod sets are named after it: never taken from another",
    ),
]


@pytest.mark.parametrize(("first", "second", "shared", "why"), MEMO_CASES)
def test_a_spec_is_taken_from_an_earlier_object_only_when_nothing_it_depends_on_differs(
    first: dict[str, Any], second: dict[str, Any], shared: bool, why: str
) -> None:
    memo = SpecMemo()
    as_read = copy.deepcopy(second)
    taken = memo.spec(first)
    spec = memo.spec(second)
    assert (spec is taken) is shared, why
    assert _reported(spec) == _reported(workload_spec(second)), why
    # Taken: the object holds the first one's spec mapping (one copy per template), and its
    # contents are still what was read.
    assert (second["spec"] is first["spec"]) is shared, why
    assert second == as_read, why


def test_the_remembered_kinds_are_the_ones_whose_spec_ignores_identity() -> None:
    """MEMO_KINDS is a claim about shared/workload_kinds.py: if one of them starts reading
    the object's name (as AppWrapper does), this fails before the memo reports a wrong spec."""
    samples = {"Job": _job(), "Pod": _pod("a"), "RayJob": _ray_job("a")}
    assert set(samples) == MEMO_KINDS
    for kind, obj in samples.items():
        renamed = _renamed(obj, "other")
        assert _reported(workload_spec(obj)) == _reported(workload_spec(renamed)), kind


# (object, why it is refused)
REFUSED = [
    (_job(spec__parallelism=0), "no pods"),
    (_job(metadata__labels={"kueue.x-k8s.io/queue-name": "Not A Name"}), "a bad queue name"),
    (_job(spec="not a mapping"), "a spec that is no mapping"),
]


@pytest.mark.parametrize(("obj", "why"), REFUSED)
def test_a_refused_object_is_refused_each_time_and_never_remembered(
    obj: dict[str, Any], why: str
) -> None:
    memo = SpecMemo()
    key = "team-a.a"
    value = msgspec.json.encode(obj)
    without = read_workload(key, value)
    assert isinstance(without, str), why
    assert read_workload(key, value, memo) == without, why
    assert read_workload(key, value, memo) == without, f"{why}: the second time too"
    assert memo.specs == {}, why


def test_the_memo_forgets_its_oldest_spec_past_its_size() -> None:
    memo = SpecMemo(size=2)
    one, two, three = (_job(spec__parallelism=n) for n in (1, 2, 3))
    first = memo.spec(one)
    memo.spec(two)
    memo.spec(three)
    assert len(memo.specs) == 2
    assert memo.spec(_renamed(three, "b")).pod_sets[0].count == 3
    again = memo.spec(_renamed(one, "b"))
    assert again is not first, "forgotten: read again"
    assert _reported(again) == _reported(first)


def test_read_workload_with_the_memo_returns_the_objects_own_identity() -> None:
    """The memo shares the spec, never the object: each read returns its own mapping."""
    memo = SpecMemo()
    for name in ("a", "b"):
        obj = _renamed(_job(), name)
        read = read_workload(f"team-b.{name}", msgspec.json.encode(obj), memo)
        assert not isinstance(read, str)
        assert read[0] == obj
