"""The config bucket's keys come from one function (shared/config.py ``config_key``)."""

from __future__ import annotations

import pytest

from shared.config import config_key, config_key_prefix, object_key, parse_object

V1 = "kueue.x-k8s.io/v1beta1"

# (kind, name, namespace, key, why)
KEYS = [
    ("ClusterQueue", "cq", None, "clusterqueue._.cq", "cluster-scoped: `_` for the namespace"),
    ("LocalQueue", "lq", "team", "localqueue.team.lq", "namespaced: its namespace"),
    ("LocalQueue", "lq", "", "localqueue._.lq", "an empty namespace is no namespace"),
    ("WorkloadPriorityClass", "high", None, "workloadpriorityclass._.high", "kind lower-cased"),
]


@pytest.mark.parametrize(
    ("kind", "name", "namespace", "key", "why"), KEYS, ids=[k[4] for k in KEYS]
)
def test_config_key(kind: str, name: str, namespace: str | None, key: str, why: str) -> None:
    assert config_key(kind, name, namespace) == key, why
    assert key.startswith(config_key_prefix(kind, namespace)), "the prefix selects it"


def test_an_object_is_stored_under_the_key_of_its_kind_namespace_and_name() -> None:
    local_queue = parse_object(
        {
            "apiVersion": V1,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "team"},
            "spec": {"clusterQueue": "cq"},
        }
    )
    assert object_key(local_queue) == config_key("LocalQueue", "lq", "team")


def test_a_namespace_prefix_does_not_select_another_namespace() -> None:
    assert not config_key("LocalQueue", "lq", "team-b").startswith(
        config_key_prefix("LocalQueue", "team")
    )
