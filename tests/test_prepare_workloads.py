"""`berth submit` and `berth submit --dry-run` read workload files through one function,
berth_cli.writing.prepare_workloads: table-driven, with the reason per case."""

from __future__ import annotations

from typing import Any

import pytest

from berth_cli.client import CliError
from berth_cli.writing import prepare_workloads

_POD = {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}


def _pod(name: str, total: str | None = None) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    annotations = {}
    if total is not None:
        labels["kueue.x-k8s.io/pod-group-name"] = "g"
        annotations["kueue.x-k8s.io/pod-group-total-count"] = total
    metadata = {"name": name, "labels": labels, "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": _POD}


_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ClusterQueue",
    "metadata": {"name": "cq"},
}

REFUSED: list[tuple[str, list[tuple[list[dict[str, Any]], str]], str]] = [
    (
        "a configuration kind goes through berth apply -f; the message names its document",
        [([_pod("a"), _QUEUE], "w.yaml")],
        "w.yaml: document 2: ClusterQueue is configuration; use `berth apply -f`",
    ),
    (
        "one pod group's Pods are checked together across files",
        [([_pod("a", total="2")], "one.yaml"), ([_pod("b", total="3")], "two.yaml")],
        "two.yaml: document 1: pod group 'g': total count 3 differs from 2"
        " given by another of its pods",
    ),
]


@pytest.mark.parametrize(("reason", "files", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(reason: str, files: list[tuple[list[dict[str, Any]], str]], message: str) -> None:
    with pytest.raises(CliError) as caught:
        prepare_workloads(files, namespace=None)
    assert str(caught.value) == message, reason


def test_each_workload_says_where_it_stands() -> None:
    """Documents are counted per file from 1, and each gets the namespace asked for."""
    files = [([_pod("a"), _pod("b")], "x.yaml"), ([_pod("c")], "y.yaml")]
    prepared = prepare_workloads(files, namespace="team")
    assert [
        (obj["metadata"]["name"], obj["metadata"]["namespace"], where) for obj, where in prepared
    ] == [
        ("a", "team", "x.yaml: document 1"),
        ("b", "team", "x.yaml: document 2"),
        ("c", "team", "y.yaml: document 1"),
    ]
