"""Fuzzing every decoder and loader: whatever it is given, it returns or raises its own
documented error (a bare KeyError, TypeError or AttributeError is a bug).

Inputs are valid documents with one to three values replaced by junk (so the fuzzing reaches
deep fields), and raw text or bytes. Examples are few per test: the suite stays fast.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import msgspec
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth_cli.client import CliError
from berth_cli.tasks import TaskError, load_managed_job
from berth_cli.writing import prepare_workload
from services.watcher.local.objects import read_object, read_status
from shared.config import ConfigError, decode_object, load_documents, parse_object
from shared.events import (
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
    decode_event,
    encode_event,
    now,
)
from shared.quantities import QuantityError, parse_quantity
from shared.workloads import WorkloadError, check_identity, workload_spec

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["", "-1", "1e999999", "/tmp/x", "..", "Ünï", "a" * 300, "500m"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6) | st.integers(0, 3), inner, max_size=3),
    max_leaves=6,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _paths(value, (*prefix, index))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, *bases: Any) -> Any:
    """A valid document with one to three of its values (at any depth) replaced by junk."""
    doc = draw(st.sampled_from(bases))
    for _ in range(draw(st.integers(1, 3))):
        doc = _replace(doc, draw(st.sampled_from(list(_paths(doc)))), draw(JUNK))
    return doc


V1 = "kueue.x-k8s.io/v1beta1"
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "j",
        "namespace": "default",
        "uid": "u-1",
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "labels": {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": "p"},
        "annotations": {"berth.dev/simulated-runtime": "1s"},
    },
    "spec": {
        "parallelism": 2,
        "completions": 2,
        "template": {
            "spec": {
                "priorityClassName": "x",
                "containers": [
                    {
                        "name": "c",
                        "command": ["true"],
                        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
                    }
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": 2}}}],
                "overhead": {"cpu": "1m"},
            }
        },
    },
}
RAYJOB = {
    "apiVersion": "ray.io/v1",
    "kind": "RayJob",
    "metadata": {"name": "r", "uid": "u-2"},
    "spec": {
        "entrypoint": "python x.py",
        "rayClusterSpec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "w",
                    "replicas": 2,
                    "minReplicas": 1,
                    "template": {"spec": {"containers": [{"name": "w"}]}},
                }
            ],
        },
    },
}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u-3"}, "spec": {"containers": [{"name": "c"}]}}
CONFIG = [
    {
        "apiVersion": V1,
        "kind": "ClusterQueue",
        "metadata": {"name": "cq", "labels": {"a": "b"}},
        "spec": {
            "cohort": "c",
            "namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 4, "borrowingLimit": "2", "lendingLimit": 1}]}],
                }
            ],
            "preemption": {"borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 3}},
            "fairSharing": {"weight": "1"},
        },
    },
    {"apiVersion": V1, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}},
    {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {"nodeLabels": {"a": "b"}, "nodeTaints": [{"key": "k", "effect": "NoSchedule"}]}},
    {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": "c"}, "spec": {"parentName": "r"}},
    {"apiVersion": V1, "kind": "WorkloadPriorityClass", "metadata": {"name": "w"}, "value": 3},
    {"apiVersion": "berth.dev/v1alpha1", "kind": "ClusterQueuePolicy", "metadata": {"name": "p"}, "spec": {"clusterQueues": ["cq"], "minimumRunTime": "1m", "ageing": {"priorityPerMinute": 1, "maxBoost": 3, "reserveAfter": "10m"}}},
    {"apiVersion": "berth.dev/v1alpha1", "kind": "Configuration", "metadata": {"name": "c"}, "spec": {"admission": {"waitTargets": [{"wait": "5m", "minPriority": 1}]}}},
]
TASK = {
    "name": "t",
    "num_nodes": 2,
    "resources": {"cpus": "4+", "memory": 16, "accelerators": "T4:2", "labels": {"a": "b"}, "job_recovery": {"strategy": "EAGER", "max_restarts_on_errors": 2}, "image_id": "docker:x"},
    "setup": "s",
    "run": "r",
    "envs": {"A": "1"},
    "config": {"kubernetes": {"pod_config": {"metadata": {"labels": {"x": "y"}}, "spec": {"priorityClassName": "p", "containers": [{"env": [{"name": "Z", "value": "1"}]}]}}}},
}
EVENTS = [
    msgspec.to_builtins(
        WorkloadSubmitted(
            source="watcher",
            workload=WorkloadRef("default", "j", "u"),
            kind="Job",
            queue_name="lq",
            pod_sets=[PodSet("main", 2, {"cpu": 1000}, min_count=1)],
            created=now(),
        )
    ),
    msgspec.to_builtins(
        WorkloadAdmitted(
            source="admission",
            workload=WorkloadRef("default", "j", "u"),
            cluster_queue="cq",
            local_queue="lq",
            priority=1,
            assignments=[FlavorAssignment("main", 2, {"cpu": "f"}, {"cpu": 2000})],
            generation=1,
        )
    ),
]


@FUZZ
@given(st.one_of(mutated(*EVENTS).map(msgspec.json.encode), st.binary(max_size=200)))
def test_decode_event(data: bytes) -> None:
    try:
        event = decode_event(data)
    except msgspec.DecodeError:  # ValidationError included: it names the field's path
        return
    assert decode_event(encode_event(event)) == event


@FUZZ
@given(mutated(*CONFIG))
def test_parse_config_object(document: Any) -> None:
    try:
        parse_object(document)
    except ConfigError as error:
        assert "\n" not in str(error)


@FUZZ
@given(st.one_of(mutated(*CONFIG).map(lambda d: msgspec.json.encode(d)), st.binary(max_size=100)))
def test_decode_stored_config_object(data: bytes) -> None:
    try:
        decode_object(data)
    except (ConfigError, msgspec.DecodeError):
        pass


@FUZZ
@given(mutated(*CONFIG, JOB))
def test_load_documents_yaml(document: Any) -> None:
    text = yaml.safe_dump_all([document, document])
    try:
        for loaded in load_documents(text, source="f.yaml"):
            parse_object(loaded)
    except ConfigError as error:
        assert str(error).startswith("f.yaml: ") or "document" in str(error)


@FUZZ
@given(mutated(JOB, RAYJOB, POD))
def test_workload_spec_and_identity(obj: Any) -> None:
    for read in (workload_spec, check_identity):
        try:
            read(obj)
        except WorkloadError as error:
            assert "\n" not in str(error)


@FUZZ
@given(mutated(JOB, RAYJOB, POD))
def test_the_cli_prepares_or_refuses_a_workload(document: Any) -> None:
    if not isinstance(document, dict):
        return  # YAML loading already refused it ("document 1 is not a mapping")
    try:
        prepare_workload(document, namespace=None, where="f.yaml: document 1")
    except CliError as error:
        assert str(error).startswith("f.yaml: document 1: ")


@FUZZ
@given(st.one_of(mutated(JOB, RAYJOB, POD).map(lambda d: msgspec.json.encode(d)), st.binary(max_size=100)))
def test_the_local_backend_reads_an_object_or_a_reason(value: bytes) -> None:
    assert isinstance(read_object("default.j", value), dict | str)
    assert isinstance(read_status(value), dict | str)


@FUZZ
@given(mutated(TASK, JOB))
def test_load_managed_job(document: Any) -> None:
    try:
        text = yaml.safe_dump(document)
    except yaml.YAMLError:
        return
    try:
        load_managed_job(text, source="task.yaml")
    except TaskError as error:
        assert str(error).startswith("task.yaml: ")


@FUZZ
@given(JUNK)
def test_parse_quantity(value: Any) -> None:
    try:
        assert 0 <= parse_quantity(value) <= 2**63 - 1
    except QuantityError:
        pass
