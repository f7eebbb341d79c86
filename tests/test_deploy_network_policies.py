"""NetworkPolicies in berth-system: ingress denied by default, only the paths Berth needs open."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.deploy_manifests import (
    NAMESPACE,
    PORTS,
    SERVICES,
    Manifest,
    by_kind,
    fixture_manifests,  # noqa: F401 - a fixture, requested by name
    matches,
    pod_templates,
)

CONSOLE_LABEL = {"berth.dev/console": "true"}
MONITORING_LABEL = {"berth.dev/monitoring": "true"}


@dataclass(frozen=True)
class Source:
    """Who connects: a pod's namespace, that namespace's labels, and the pod's labels."""

    namespace: str
    namespace_labels: dict[str, str]
    labels: dict[str, str]


def _source(namespace: str, labels: dict[str, str], **namespace_labels: str) -> Source:
    return Source(namespace, {"kubernetes.io/metadata.name": namespace, **namespace_labels}, labels)


def _allowed_ports(manifests: list[Manifest], source: Source, target: Manifest) -> set[int]:
    """Ports of `target` (a pod template in berth-system) that `source` may connect to."""
    target_labels = target["metadata"]["labels"]
    named = {
        p["name"]: p["containerPort"]
        for c in target["spec"]["containers"]
        for p in c.get("ports", [])
        if "name" in p
    }
    ports: set[int] = set()
    for policy in by_kind(manifests, "NetworkPolicy").values():
        if not matches(policy["spec"]["podSelector"], target_labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")

            def admits(peer: Manifest, policy: Manifest = policy) -> bool:
                assert "ipBlock" not in peer, "ipBlock peers are not modelled here"
                if "namespaceSelector" not in peer:  # pods of the policy's own namespace
                    in_namespace = source.namespace == policy["metadata"]["namespace"]
                    return in_namespace and matches(peer.get("podSelector", {}), source.labels)
                return matches(peer["namespaceSelector"], source.namespace_labels) and matches(
                    peer.get("podSelector", {}), source.labels
                )

            if peers is None or any(admits(peer) for peer in peers):
                for port in rule.get("ports", []):
                    value = port["port"]
                    ports.add(named[value] if isinstance(value, str) else value)
    return ports


STRANGER = _source(NAMESPACE, {"app": "something-else"})
ELSEWHERE = _source("default", {"app": "something-else"})
PROMETHEUS = _source("monitoring", {"app": "prometheus"}, **MONITORING_LABEL)
UNLABELLED_MONITORING = _source("monitoring", {"app": "prometheus"})
INGRESS_CONTROLLER = _source("ingress-nginx", {"app": "ingress-nginx"}, **CONSOLE_LABEL)

# (target, source, port, allowed); "service" stands for each of the four Berth services,
# "console" for the console's pod, "http" for the target's own port.
REACHABILITY = [
    ("nats", "service", 4222, True),
    ("nats", "console", 4222, True),
    ("nats", "console", 6222, False),
    ("nats", "console", 8222, False),
    ("nats", INGRESS_CONTROLLER, 4222, False),
    ("nats", STRANGER, 4222, False),
    ("nats", ELSEWHERE, 4222, False),
    ("nats", PROMETHEUS, 4222, False),
    ("nats", "nats", 6222, True),
    ("nats", "service", 6222, False),
    ("nats", PROMETHEUS, 6222, False),
    ("nats", PROMETHEUS, 8222, True),
    ("nats", UNLABELLED_MONITORING, 8222, False),
    ("nats", "service", 8222, False),
    ("nats", ELSEWHERE, 8222, False),
    ("service", PROMETHEUS, "http", True),
    ("service", UNLABELLED_MONITORING, "http", False),
    ("service", ELSEWHERE, "http", False),
    ("service", STRANGER, "http", False),
    ("service", "nats", "http", False),
    ("service", INGRESS_CONTROLLER, "http", False),
    ("service", "console", "http", False),
    ("console", INGRESS_CONTROLLER, "http", True),
    ("console", PROMETHEUS, "http", False),
    ("console", ELSEWHERE, "http", False),
    ("console", STRANGER, "http", False),
    ("console", "service", "http", False),
    ("console", "nats", "http", False),
]


@pytest.mark.parametrize(("target", "source", "port", "allowed"), REACHABILITY)
def test_network_policies_open_only_the_needed_paths(
    manifests: list[Manifest], target: str, source: Source | str, port: int | str, allowed: bool
) -> None:
    """Ingress in berth-system is denied by default except: Berth's services and the console
    -> NATS 4222, NATS <-> NATS 6222, NATS 8222 and the services' metrics port only from
    namespaces labelled berth.dev/monitoring=true, the console's port only from namespaces
    labelled berth.dev/console=true."""
    policies = by_kind(manifests, "NetworkPolicy").values()
    assert any(
        p["spec"]["podSelector"] == {}
        and p["spec"]["policyTypes"] == ["Ingress"]
        and not p["spec"].get("ingress")
        for p in policies
    ), "no default-deny ingress policy"
    templates = dict(pod_templates(manifests))

    def as_source(name: str) -> Source:
        return _source(NAMESPACE, templates[name]["metadata"]["labels"])

    def pods(name: str) -> list[str]:
        if name == "service":
            return [f"berth-{s}" for s in SERVICES]
        return ["nats"] if name == "nats" else [f"berth-{name}"]

    targets = pods(target)
    sources = [as_source(p) for p in pods(source)] if isinstance(source, str) else [source]
    for name in targets:
        number = PORTS[name.removeprefix("berth-")] if port == "http" else port
        for who in sources:
            reachable = number in _allowed_ports(manifests, who, templates[name])
            assert reachable == allowed, f"{who} -> {name}:{number}"


def test_webhook_port_is_open_on_the_watcher_only(manifests: list[Manifest]) -> None:
    """9443 (the optional webhook, called by the API server) is open on the watcher only."""
    templates = dict(pod_templates(manifests))
    for name, template in templates.items():
        open_ports = _allowed_ports(manifests, ELSEWHERE, template)
        assert (9443 in open_ports) == (name == "berth-watcher"), name
