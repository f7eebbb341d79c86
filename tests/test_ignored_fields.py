"""Fields the CLI accepts and does not act on are each said once (berth_cli/ignored.py), and
pod groups given to `berth submit` are checked as Kueue's webhook checks them."""

from __future__ import annotations

from typing import Any

import pytest

from berth_cli.client import CliError
from berth_cli.ignored import config_ignored, warn_ignored, workload_ignored
from berth_cli.writing import check_pod_groups, prepare_workload

_POD = {"containers": [{"name": "c", "command": ["true"]}]}


def _job(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "annotations": annotations},
        "spec": {
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}},
                "spec": _POD,
            }
        },
    }


CONFIG: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "a ClusterQueue's admission checks are acted on (docs/admission-checks.md): no warning",
        {
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {"admissionChecks": ["prov"], "resourceGroups": []},
        },
        [],
    ),
    (
        "a ResourceFlavor's topology (topology-aware scheduling)",
        {"kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {"topologyName": "default"}},
        ["ResourceFlavor f: spec.topologyName"],
    ),
    (
        "an empty list of checks asks for nothing",
        {"kind": "ClusterQueue", "spec": {"admissionChecks": []}},
        [],
    ),
    ("a LocalQueue has nothing ignored", {"kind": "LocalQueue", "spec": {"clusterQueue": "x"}}, []),
    (
        "waitForPodsReady's recoveryTimeout is acted on (pods_ready.py): no warning",
        {"kind": "Configuration", "metadata": {"name": "c"}, "spec": {"waitForPodsReady": {"enable": True, "recoveryTimeout": "3m"}}},
        [],
    ),
    (
        "Kueue's default timestamp (Eviction) is acted on: a requeued workload queues by it",
        {"kind": "Configuration", "metadata": {"name": "c"}, "spec": {"waitForPodsReady": {"enable": True, "requeuingStrategy": {"timestamp": "Eviction"}}}},
        [],
    ),
    (
        "timestamp Creation is acted on too: no warning",
        {"kind": "Configuration", "metadata": {"name": "c"}, "spec": {"waitForPodsReady": {"enable": True, "requeuingStrategy": {"timestamp": "Creation"}}}},
        [],
    ),
    (
        "waitForPodsReady off: its requeuing strategy does nothing, in Kueue too",
        {"kind": "Configuration", "metadata": {"name": "c"}, "spec": {"waitForPodsReady": {"enable": False}}},
        [],
    ),
]


@pytest.mark.parametrize(("reason", "document", "fields"), CONFIG, ids=[c[0] for c in CONFIG])
def test_config_fields_not_acted_on(
    reason: str, document: dict[str, Any], fields: list[str]
) -> None:
    """Each configuration field Berth parses but does not act on is named (see the id)."""
    assert config_ignored(document) == fields, reason


WORKLOADS: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "topology annotations on the object and on its pod template",
        _job(**{"kueue.x-k8s.io/podset-preferred-topology": "zone"}),
        [
            "metadata.annotations.kueue.x-k8s.io/podset-preferred-topology",
            "spec.template.metadata.annotations.kueue.x-k8s.io/podset-required-topology",
        ],
    ),
    (
        "ProvisioningRequest parameters and MultiKueue's managedBy",
        {
            **_job(**{"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}),
            "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "template": {"spec": _POD}},
        },
        ["metadata.annotations.provreq.kueue.x-k8s.io/maxRunDurationSeconds", "spec.managedBy"],
    ),
    (
        "the queue name and priority class are acted on",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": _POD,
        },
        [],
    ),
]


@pytest.mark.parametrize(("reason", "document", "fields"), WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_workload_fields_not_acted_on(
    reason: str, document: dict[str, Any], fields: list[str]
) -> None:
    """Kueue's labels and annotations Berth does not act on are named with their path."""
    assert workload_ignored(document) == fields, reason


def test_one_warning_line_per_field_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """`berth: warning: <file>: <field> is not supported and is ignored`, once per field."""
    warn_ignored("task.yaml", ["workdir", "resources.use_spot", "workdir"])
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "berth: warning: task.yaml: workdir is not supported and is ignored",
        "berth: warning: task.yaml: resources.use_spot is not supported and is ignored",
    ]


def _member(name: str, total: str = "2", queue: str = "q", group: str = "g") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/pod-group-name": group},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": total},
        },
        "spec": _POD,
    }


GROUPS: list[tuple[str, list[dict[str, Any]], str]] = [
    ("pods disagree on the group's size", [_member("a"), _member("b", total="3")], "differs"),
    ("pods name two queues", [_member("a"), _member("b", queue="other")], "must name one queue"),
    ("more pods than the group's size", [_member(n) for n in "abc"], "this one is too many"),
    ("a group name that is not a name", [_member("a", group="Not Valid")], "pod-group-name"),
    (
        "a PodGroup is Berth's, not a user's",
        [{"apiVersion": "berth.dev/v1", "kind": "PodGroup"}],
        "submit its Pods",
    ),
]


@pytest.mark.parametrize(("reason", "documents", "message"), GROUPS, ids=[g[0] for g in GROUPS])
def test_bad_pod_groups_are_refused(reason: str, documents: list[Any], message: str) -> None:
    """A pod group `berth submit` cannot queue is refused in one line saying why."""
    with pytest.raises(CliError) as caught:
        prepared = [
            (prepare_workload(d, namespace=None, where=f"doc {i}"), f"doc {i}")
            for i, d in enumerate(documents)
        ]
        check_pod_groups(prepared)
    assert message in str(caught.value), reason
    assert "\n" not in str(caught.value)


def test_part_of_a_group_is_accepted() -> None:
    """One pod of a group of two is fine: the group waits for the other."""
    check_pod_groups([(prepare_workload(_member("a"), namespace=None, where="d"), "d")])
