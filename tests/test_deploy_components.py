"""The Deployments of the four services and the console: security, probes, resources, settings,
replicas, their NATS connection, their Service, and the module each runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth_cli.up import CONSOLE, CONSOLE_PORT
from berth_console.settings import DEFAULT_PORT as CONSOLE_DEFAULT_PORT
from shared.service import DEFAULT_PORTS
from tests.deploy_manifests import (
    COMPONENTS,
    NAMESPACE,
    PORTS,
    REPO,
    SERVICES,
    TLS_SECRET,
    Manifest,
    by_kind,
    deployment_named,
    fixture_manifests,  # noqa: F401 - a fixture, requested by name
    matches,
    module_of,
    one_of,
    pod_files,
)

IMAGE = "ghcr.io/berth-dev/berth:0.1.0"


def _container(deployment: Manifest) -> Manifest:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one container per Berth pod"
    container: Manifest = containers[0]
    return container


def _env(container: Manifest) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _effective_env(manifests: list[Manifest], container: Manifest) -> dict[str, str]:
    """The container's environment: its ConfigMaps (envFrom), then its own env on top."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(one_of(manifests, "ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({k: v for k, v in _env(container).items() if v is not None})
    return env


@pytest.mark.parametrize("service", COMPONENTS)
def test_deployment_security_probes_and_resources(manifests: list[Manifest], service: str) -> None:
    """Each service and the console runs as UID 10001 (non-root, read-only root fs, no escalation, no caps,
    RuntimeDefault seccomp) with /healthz and /readyz probes on its port and CPU/memory
    requests and limits."""
    deployment = deployment_named(manifests, service)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})

    assert pod_sc.get("runAsNonRoot") is True
    assert pod_sc.get("runAsUser") == 10001
    assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault"
    assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
    assert sc.get("runAsUser", pod_sc.get("runAsUser")) == 10001
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc.get("capabilities", {}).get("drop") == ["ALL"]
    assert not sc.get("capabilities", {}).get("add")
    assert not sc.get("privileged")

    port = PORTS[service]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports.get("http") == port

    def probe_target(kind: str) -> tuple[str, int]:
        http_get = container[kind]["httpGet"]
        target = http_get["port"]
        return http_get["path"], ports[target] if isinstance(target, str) else target

    assert probe_target("livenessProbe") == ("/healthz", port)
    assert probe_target("readinessProbe") == ("/readyz", port)

    resources = container.get("resources", {})
    for section in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            assert resources.get(section, {}).get(resource), f"{section}.{resource} missing"


@pytest.mark.parametrize("service", SERVICES)
def test_deployment_settings_writable_dirs_and_grace(
    manifests: list[Manifest], service: str
) -> None:
    """Each service reads berth-config, listens on its default port, writes only to emptyDirs
    (/tmp, BERTH_DATA_DIR) and is killed only after its 20 s drain (grace period 30 s)."""
    config = one_of(manifests, "ConfigMap", "berth-config")["data"]
    deployment = deployment_named(manifests, service)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)

    assert container["image"] == IMAGE
    assert {"configMapRef": {"name": "berth-config"}} in container.get("envFrom", [])
    assert config["BERTH_HTTP_HOST"] == "0.0.0.0"
    assert _env(container).get("BERTH_HTTP_PORT") == str(DEFAULT_PORTS[service])

    grace = float(config["BERTH_GRACE_SECONDS"])
    assert grace == 20
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["terminationGracePeriodSeconds"] > grace

    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/tmp", config["BERTH_DATA_DIR"]):
        assert path in mounts, f"nothing mounted on {path}"
        assert mounts[path]["name"] in empty_dirs, f"{path} is not an emptyDir"
    for path, mount in mounts.items():
        if mount["name"] not in empty_dirs:
            assert mount.get("readOnly") is True, f"{path} is writable and not an emptyDir"


def test_console_settings_writable_dirs_and_grace(manifests: list[Manifest]) -> None:
    """The console reads berth-config, listens on all addresses at `berth up`'s console port,
    writes only to an emptyDir (/tmp) and has its 5 s shutdown inside its grace period."""
    from berth_console.server import GRACE_S

    deployment = deployment_named(manifests, CONSOLE)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    env = _env(container)

    assert container["image"] == IMAGE
    assert {"configMapRef": {"name": "berth-config"}} in container.get("envFrom", [])
    assert CONSOLE_PORT == CONSOLE_DEFAULT_PORT
    assert env.get("BERTH_CONSOLE_HOST") == "0.0.0.0"
    assert env.get("BERTH_CONSOLE_PORT") == str(CONSOLE_PORT)
    assert pod["terminationGracePeriodSeconds"] > GRACE_S

    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/tmp"]["name"] in empty_dirs
    for path, mount in mounts.items():
        if mount["name"] not in empty_dirs:
            assert mount.get("readOnly") is True, f"{path} is writable and not an emptyDir"


def test_console_runs_one_replica_without_a_gap_or_a_drain_blocker(
    manifests: list[Manifest],
) -> None:
    """The console (no lease, state rebuilt from the stream) runs one replica, rolls out by
    adding before removing, and no PodDisruptionBudget keeps a node drain waiting for it."""
    spec = deployment_named(manifests, CONSOLE)["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    budgets = [
        b
        for b in by_kind(manifests, "PodDisruptionBudget").values()
        if matches(b["spec"]["selector"], labels)
    ]
    assert not budgets, "a PodDisruptionBudget on one replica blocks node drains"


@pytest.mark.parametrize("service", SERVICES)
def test_each_role_runs_two_replicas_that_never_share_a_gap(
    manifests: list[Manifest], service: str
) -> None:
    """Each service runs 2 replicas (one active under the lease, one warm standby), rolls out
    by adding before removing, has a PodDisruptionBudget keeping one, and prefers its two
    replicas on different nodes."""
    deployment = deployment_named(manifests, service)
    spec = deployment["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}

    budgets = [
        b
        for b in by_kind(manifests, "PodDisruptionBudget").values()
        if matches(b["spec"]["selector"], labels)
    ]
    assert len(budgets) == 1, f"{service}: {len(budgets)} PodDisruptionBudgets select it"
    assert budgets[0]["spec"] == {"minAvailable": 1, "selector": spec["selector"]}

    preferred = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    terms = [p["podAffinityTerm"] for p in preferred]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname" and t["labelSelector"] == spec["selector"]
        for t in terms
    ), f"{service}: no anti-affinity between its own replicas"


@pytest.mark.parametrize("service", COMPONENTS)
def test_each_service_connects_as_itself_over_tls(manifests: list[Manifest], service: str) -> None:
    """Each service (and the console) gets BERTH_REPLICA_ID from its pod's name (the services:
    the console holds no lease), BERTH_CREDS naming a seed file
    that is its own user's key from its own Secret (and no other seed, and not NATS's private
    key), a tls:// URL of the `nats` Service, BERTH_NATS_CA from berth-nats-tls, and its
    event stream replicated 3 ways."""
    deployment = deployment_named(manifests, service)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    env = _effective_env(manifests, container)
    files = pod_files(manifests, pod, container)

    if service in SERVICES:
        replica_id = next(e for e in container["env"] if e["name"] == "BERTH_REPLICA_ID")
        assert replica_id == {
            "name": "BERTH_REPLICA_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }
    assert Path(env["BERTH_CREDS"]).name == f"{service}.nk"  # the file names the user
    assert files.get(env["BERTH_CREDS"]) == ("Secret", f"berth-creds-{service}", f"{service}.nk")
    assert files.get(env["BERTH_NATS_CA"]) == ("Secret", TLS_SECRET, "ca.crt")
    assert set(files.values()) == {
        ("Secret", f"berth-creds-{service}", f"{service}.nk"),
        ("Secret", TLS_SECRET, "ca.crt"),
    }, f"{service} sees more than its seed and the CA"
    assert env["BERTH_NATS_URL"] == f"tls://nats.{NAMESPACE}.svc:4222"
    assert one_of(manifests, "Service", "nats")
    assert env["BERTH_STREAM_REPLICAS"] == "3"
    # Secret files belong to root: group-readable for fsGroup 10001, nobody else.
    volume = next(v for v in pod["volumes"] if "projected" in v)
    assert volume["projected"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == 10001


def test_watcher_uses_kubernetes_backend(manifests: list[Manifest]) -> None:
    """In the cluster the watcher runs the kubernetes backend, not local processes."""
    container = _container(deployment_named(manifests, "watcher"))
    assert _env(container).get("BERTH_WATCHER_BACKEND") == "kubernetes"


@pytest.mark.parametrize("service", COMPONENTS)
def test_metrics_service_targets_the_service_port(manifests: list[Manifest], service: str) -> None:
    """Each service and the console has a Service on its default port that selects only its
    own pods."""
    svc = one_of(manifests, "Service", f"berth-{service}")
    template = deployment_named(manifests, service)["spec"]["template"]
    assert matches({"matchLabels": svc["spec"]["selector"]}, template["metadata"]["labels"])
    for other in set(COMPONENTS) - {service}:
        other_labels = deployment_named(manifests, other)["spec"]["template"]["metadata"]["labels"]
        assert not matches({"matchLabels": svc["spec"]["selector"]}, other_labels)
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        (PORTS[service], "http")
    ]


@pytest.mark.parametrize("service", COMPONENTS)
def test_deployment_command_runs_its_own_module(manifests: list[Manifest], service: str) -> None:
    """Deployment berth-<name> runs the module `berth up` runs for it (`services.<name>`,
    `berth_console`), a package with a __main__.py."""
    module = module_of(service)
    assert _container(deployment_named(manifests, service))["command"] == ["python", "-m", module]
    assert (REPO / module.replace(".", "/") / "__main__.py").is_file(), module
