"""Deployment artefacts (deploy/base, compose.yaml, Dockerfile), checked offline.

The Kustomize base is rendered with ``kubectl kustomize`` when kubectl is on PATH (it needs
no cluster), else by :func:`render_base` below, which understands exactly the subset of
Kustomize the base uses and refuses anything else. When both are available, a test checks
that they agree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.service import DEFAULT_PORTS

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "deploy" / "base"
NAMESPACE = "berth-system"
IMAGE = "ghcr.io/berth-dev/berth:0.1.0"
SERVICES = sorted(DEFAULT_PORTS)
WATCHER_SA = {"kind": "ServiceAccount", "name": "berth-watcher", "namespace": NAMESPACE}

# Oldest Kubernetes the install guide promises, and the newest kubernetes-validate knows.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "CustomResourceDefinition",
}

Manifest = dict[str, Any]


# --- rendering -------------------------------------------------------------------------------


def _load_yaml_documents(path: Path) -> list[Manifest]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def render_base(base: Path) -> list[Manifest]:
    """Render a kustomization that uses only resources, namespace and labels (no selectors)."""
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    supported = {"apiVersion", "kind", "namespace", "labels", "resources"}
    unsupported = set(kustomization) - supported
    assert not unsupported, f"render_base does not implement {sorted(unsupported)}"
    pairs: dict[str, str] = {}
    for entry in kustomization.get("labels", []):
        assert not entry.get("includeSelectors") and not entry.get("includeTemplates"), entry
        pairs.update(entry["pairs"])
    namespace = kustomization.get("namespace")
    manifests: list[Manifest] = []
    for resource in kustomization["resources"]:
        path = base / resource
        assert path.is_file(), f"{resource}: render_base renders files, not directories"
        for doc in _load_yaml_documents(path):
            metadata = doc.setdefault("metadata", {})
            if namespace and doc["kind"] not in CLUSTER_SCOPED:
                metadata["namespace"] = namespace
            if pairs:
                metadata.setdefault("labels", {}).update(pairs)
            manifests.append(doc)
    return manifests


def render_with_kubectl(base: Path) -> list[Manifest] | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    result = subprocess.run(
        [kubectl, "kustomize", str(base)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _key(manifest: Manifest) -> tuple[str, str, str]:
    metadata = manifest["metadata"]
    return (manifest["kind"], metadata.get("namespace", ""), metadata["name"])


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    rendered = render_with_kubectl(BASE)
    return rendered if rendered is not None else render_base(BASE)


def _by_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = _by_kind(manifests, kind)
    assert name in found, f"no {kind} {name!r} in deploy/base (have {sorted(found)})"
    return found[name]


def _deployment(manifests: list[Manifest], service: str) -> Manifest:
    return _one(manifests, "Deployment", f"berth-{service}")


def _container(deployment: Manifest) -> Manifest:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one container per Berth pod"
    container: Manifest = containers[0]
    return container


def _env(container: Manifest) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


# --- (a) schema validation -------------------------------------------------------------------


def test_every_rendered_manifest_validates_against_kubernetes_schemas(
    manifests: list[Manifest],
) -> None:
    """Every object in deploy/base validates strictly (no unknown fields) for Kubernetes 1.30
    and for the newest version kubernetes-validate bundles."""
    assert manifests, "deploy/base rendered nothing"
    failures = []
    for manifest in manifests:
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                failures.append(f"{_key(manifest)} @ {version}: {path}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError as error:
                failures.append(f"{_key(manifest)} @ {version}: {error.message}")
    assert not failures, "\n".join(failures)


def test_python_renderer_matches_kubectl_kustomize() -> None:
    """The in-test renderer produces exactly what `kubectl kustomize deploy/base` produces."""
    from_kubectl = render_with_kubectl(BASE)
    if from_kubectl is None:
        pytest.skip("kubectl is not installed; manifests were rendered by render_base only")
    from_python = render_base(BASE)
    assert sorted(map(_key, from_python)) == sorted(map(_key, from_kubectl))
    by_key = {_key(m): m for m in from_kubectl}
    for manifest in from_python:
        assert manifest == by_key[_key(manifest)], f"{_key(manifest)} differs"


def test_every_yaml_file_in_base_is_listed_and_loads() -> None:
    """Every YAML file in deploy/base parses and is listed in kustomization.yaml."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(kustomization["resources"])
    for name in on_disk:
        assert _load_yaml_documents(BASE / name), f"{name} holds no document"


def test_all_namespaced_objects_live_in_berth_system(manifests: list[Manifest]) -> None:
    """The base creates the berth-system Namespace and puts every namespaced object in it."""
    assert _one(manifests, "Namespace", NAMESPACE)
    for manifest in manifests:
        if manifest["kind"] not in CLUSTER_SCOPED:
            assert manifest["metadata"].get("namespace") == NAMESPACE, _key(manifest)


# --- (b) Deployments: security, probes, resources ------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_deployment_security_probes_and_resources(manifests: list[Manifest], service: str) -> None:
    """Each service runs as UID 10001 (non-root, read-only root fs, no escalation, no caps,
    RuntimeDefault seccomp) with /healthz and /readyz probes on its port and CPU/memory
    requests and limits."""
    deployment = _deployment(manifests, service)
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

    port = DEFAULT_PORTS[service]
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
    config = _one(manifests, "ConfigMap", "berth-config")["data"]
    deployment = _deployment(manifests, service)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)

    assert container["image"] == IMAGE
    assert {"configMapRef": {"name": "berth-config"}} in container.get("envFrom", [])
    assert config["BERTH_NATS_URL"] == "nats://nats:4222"
    assert config["BERTH_HTTP_HOST"] == "0.0.0.0"
    assert _env(container).get("BERTH_HTTP_PORT") == str(DEFAULT_PORTS[service])

    grace = float(config["BERTH_GRACE_SECONDS"])
    assert grace == 20
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["terminationGracePeriodSeconds"] > grace

    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    for path in ("/tmp", config["BERTH_DATA_DIR"]):
        assert path in mounts, f"nothing mounted on {path}"
        assert mounts[path] in empty_dirs, f"{path} is not an emptyDir"


def test_admission_runs_one_replica_with_recreate(manifests: list[Manifest]) -> None:
    """Admission runs exactly one replica and is replaced with Recreate, never with a surge."""
    spec = _deployment(manifests, "admission")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate"


def test_watcher_uses_kubernetes_backend(manifests: list[Manifest]) -> None:
    """In the cluster the watcher runs the kubernetes backend, not local processes."""
    container = _container(_deployment(manifests, "watcher"))
    assert _env(container).get("BERTH_WATCHER_BACKEND") == "kubernetes"


# --- (c) RBAC ----------------------------------------------------------------------------


def _rules_as_triples(rules: list[Manifest]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def test_only_the_watcher_service_account_is_bound(manifests: list[Manifest]) -> None:
    """Only the watcher's ServiceAccount is bound to any role, and no rule uses a '*' wildcard."""
    bindings = [m for m in manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings, "the watcher needs a binding"
    for binding in bindings:
        assert binding["subjects"] == [WATCHER_SA], _key(binding)
    for role in (m for m in manifests if m["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert not any("*" in item for item in rule.get(field, [])), (
                    f"{_key(role)}: wildcard in {field}: {rule}"
                )
            assert "nonResourceURLs" not in rule


def test_watcher_cluster_role_grants_exactly_the_verbs_it_needs(manifests: list[Manifest]) -> None:
    """The watcher's ClusterRole grants exactly the (group, resource, verb) set it needs."""
    workload = {"get", "list", "watch", "patch", "update"}
    kueue = (
        "clusterqueues",
        "localqueues",
        "resourceflavors",
        "workloadpriorityclasses",
        "cohorts",
    )
    expected = (
        {("batch", "jobs", v) for v in workload}
        | {("ray.io", "rayjobs", v) for v in workload}
        | {("", "pods", v) for v in workload | {"delete"}}
        | {("", "namespaces", v) for v in ("list", "watch")}
        | {("kueue.x-k8s.io", r, v) for r in kueue for v in ("get", "list", "watch")}
        | {("scheduling.k8s.io", "priorityclasses", v) for v in ("list", "watch")}
        | {("", "events", "create")}
    )
    binding = _one(manifests, "ClusterRoleBinding", "berth-watcher")
    role = _one(manifests, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    assert _rules_as_triples(role["rules"]) == expected


@pytest.mark.parametrize("service", SERVICES)
def test_only_the_watcher_gets_an_api_token(manifests: list[Manifest], service: str) -> None:
    """Each service has its own ServiceAccount, and only the watcher mounts an API token."""
    pod = _deployment(manifests, service)["spec"]["template"]["spec"]
    account = _one(manifests, "ServiceAccount", pod["serviceAccountName"])
    assert pod["serviceAccountName"] == f"berth-{service}"
    mounted = pod.get("automountServiceAccountToken", account.get("automountServiceAccountToken"))
    if service == "watcher":
        assert mounted is not False, "the watcher needs its API token"
    else:
        assert mounted is False, f"{service} must not mount an API token"


# --- NATS and NetworkPolicies ----------------------------------------------------------------


def test_nats_is_a_three_node_jetstream_cluster(manifests: list[Manifest]) -> None:
    """NATS is a 3-pod nats:2.11-alpine StatefulSet with a PVC-backed JetStream store, routes to
    all three pods via the headless Service, 8222 /healthz probes and a `nats` Service on 4222."""
    sts = _one(manifests, "StatefulSet", "nats")
    spec = sts["spec"]
    assert spec["replicas"] == 3
    headless = _one(manifests, "Service", spec["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"].get("publishNotReadyAddresses") is True
    container = spec["template"]["spec"]["containers"][0]
    assert container["image"] == "nats:2.11-alpine"
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    conf = _one(manifests, "ConfigMap", "nats-config")["data"]["nats.conf"]
    store_dir = re.search(r"store_dir:\s*(\S+)", conf)
    assert store_dir and any(mounts.get(c) == store_dir.group(1) for c in claims)
    routes = set(re.findall(r"nats://([\w.-]+):6222", conf))
    assert routes == {f"nats-{i}.{spec['serviceName']}" for i in range(3)}
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container[kind]["httpGet"]
        assert probe["path"].startswith("/healthz") and probe["port"] == "monitor"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["monitor"] == 8222

    client = _one(manifests, "Service", "nats")
    assert [p["port"] for p in client["spec"]["ports"]] == [4222]
    assert client["spec"]["selector"] == spec["selector"]["matchLabels"]


def _matches(selector: Manifest, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        present = expression["key"] in labels
        value = labels.get(expression["key"])
        match expression["operator"]:
            case "In":
                ok = value in expression["values"]
            case "NotIn":
                ok = value not in expression["values"]
            case "Exists":
                ok = present
            case "DoesNotExist":
                ok = not present
            case other:
                raise AssertionError(f"unknown selector operator {other!r}")
        if not ok:
            return False
    return True


def _pod_templates(manifests: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    for m in manifests:
        if m["kind"] in ("Deployment", "StatefulSet"):
            yield m["metadata"]["name"], m["spec"]["template"]


def _allowed_ports(
    manifests: list[Manifest], source: dict[str, str], target: Manifest
) -> set[int | str]:
    """Ports on `target` (a pod template) that a pod labelled `source` in berth-system may reach."""
    target_labels = target["metadata"]["labels"]
    ports: set[int | str] = set()
    for policy in _by_kind(manifests, "NetworkPolicy").values():
        if not _matches(policy["spec"]["podSelector"], target_labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")
            allowed = peers is None or any(
                (
                    "podSelector" in p
                    and "namespaceSelector" not in p
                    and _matches(p["podSelector"], source)
                )
                or (
                    "namespaceSelector" in p
                    and p["namespaceSelector"] == {}
                    and _matches(p.get("podSelector", {}), source)
                )
                for p in peers
            )
            if allowed:
                ports |= {p["port"] for p in rule.get("ports", [])}
    return ports


def test_network_policies_deny_by_default_and_open_only_the_needed_paths(
    manifests: list[Manifest],
) -> None:
    """Ingress is denied by default except services->NATS 4222, NATS<->NATS 6222, metrics on the
    services' http port from anywhere, and 9443 on the watcher only."""
    policies = _by_kind(manifests, "NetworkPolicy")
    deny = [
        p
        for p in policies.values()
        if p["spec"]["podSelector"] == {}
        and p["spec"]["policyTypes"] == ["Ingress"]
        and not p["spec"].get("ingress")
    ]
    assert deny, "no default-deny ingress policy"

    templates = dict(_pod_templates(manifests))
    nats = templates["nats"]
    nats_labels = nats["metadata"]["labels"]
    stranger = {"app": "something-else"}
    assert 4222 not in _allowed_ports(manifests, stranger, nats)
    assert _allowed_ports(manifests, nats_labels, nats) >= {6222}

    for service in SERVICES:
        template = templates[f"berth-{service}"]
        labels = template["metadata"]["labels"]
        assert 4222 in _allowed_ports(manifests, labels, nats), f"{service} cannot reach NATS"
        assert 6222 not in _allowed_ports(manifests, labels, nats)
        from_anywhere = _allowed_ports(manifests, stranger, template)
        assert "http" in from_anywhere or DEFAULT_PORTS[service] in from_anywhere, service
        assert (9443 in from_anywhere) == (service == "watcher"), service


@pytest.mark.parametrize("service", SERVICES)
def test_metrics_service_targets_the_service_port(manifests: list[Manifest], service: str) -> None:
    """Each service has a Service on its default port that selects only its own pods."""
    svc = _one(manifests, "Service", f"berth-{service}")
    template = _deployment(manifests, service)["spec"]["template"]
    assert _matches({"matchLabels": svc["spec"]["selector"]}, template["metadata"]["labels"])
    for other in set(SERVICES) - {service}:
        other_labels = _deployment(manifests, other)["spec"]["template"]["metadata"]["labels"]
        assert not _matches({"matchLabels": svc["spec"]["selector"]}, other_labels)
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        (DEFAULT_PORTS[service], "http")
    ]


# --- (e) commands match the modules ----------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_deployment_command_runs_its_own_module(manifests: list[Manifest], service: str) -> None:
    """Deployment berth-<name> runs `python -m services.<name>`, a module with a __main__.py."""
    assert _container(_deployment(manifests, service))["command"] == [
        "python",
        "-m",
        f"services.{service}",
    ]
    main = REPO / "services" / service / "__main__.py"
    if not main.is_file():
        pytest.skip(f"services/{service}/__main__.py does not exist yet (being written elsewhere)")


# --- (d) compose.yaml --------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> Manifest:
    loaded: Manifest = yaml.safe_load((REPO / "compose.yaml").read_text())
    return loaded


def test_compose_runs_nats_and_exactly_the_four_services(compose: Manifest) -> None:
    """compose.yaml runs nats plus one container per DEFAULT_PORTS entry, each running its own
    module once NATS is healthy."""
    services = compose["services"]
    assert set(services) == {"nats"} | set(DEFAULT_PORTS)
    for name in DEFAULT_PORTS:
        command = services[name]["command"]
        if isinstance(command, str):
            command = command.split()
        assert command == ["python", "-m", f"services.{name}"], name
        assert services[name]["depends_on"]["nats"]["condition"] == "service_healthy"
        assert "build" in services[name]
        assert services[name]["environment"]["BERTH_NATS_URL"] == "nats://nats:4222"
    nats = services["nats"]
    assert nats["image"].startswith("nats:2.11")
    assert {"-js", "-sd"} <= set(nats["command"])


def test_compose_publishes_default_ports_on_loopback_only(compose: Manifest) -> None:
    """Compose services listen on 0.0.0.0 at their default port, published on 127.0.0.1 only."""
    for name, service in compose["services"].items():
        for mapping in service.get("ports", []):
            assert isinstance(mapping, str) and mapping.startswith("127.0.0.1:"), (name, mapping)
        if name == "nats":
            continue
        port = DEFAULT_PORTS[name]
        env = service["environment"]
        assert env["BERTH_HTTP_HOST"] == "0.0.0.0"
        assert env["BERTH_HTTP_PORT"] == str(port)
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
        assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])


# --- Dockerfile ------------------------------------------------------------------------------


def test_dockerfile_is_multistage_non_root_and_lets_command_pick_the_service() -> None:
    """The image is a two-stage python:3.11-slim build running as UID 10001 with no ENTRYPOINT,
    so `command: python -m services.<name>` is the whole command line."""
    text = (REPO / "Dockerfile").read_text()
    instructions = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    image_arg = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    froms = [line for line in instructions if line.upper().startswith("FROM ")]
    assert len(froms) >= 2, "multi-stage build expected"
    bases = {
        f.split()[1].replace("${PYTHON_IMAGE}", image_arg.group(1) if image_arg else "?")
        for f in froms
    }
    assert bases == {"python:3.11-slim"}
    final_stage = instructions[instructions.index(froms[-1]) :]
    assert any(line.startswith("COPY --from=") for line in final_stage)
    users = [line for line in final_stage if line.upper().startswith("USER ")]
    assert users and users[-1].split()[1].split(":")[0] == "10001"
    assert not any(line.upper().startswith("ENTRYPOINT") for line in instructions)
    assert not any(re.search(r"\b(gcc|build-essential)\b", line) for line in final_stage)


def test_dockerignore_keeps_the_packages_in_the_build_context() -> None:
    """.dockerignore excludes everything but pyproject.toml and the packages pyproject installs."""
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    pyproject = (REPO / "pyproject.toml").read_text()
    include = re.search(r"include\s*=\s*\[([^\]]*)\]", pyproject)
    assert include
    packages = {p.strip().strip('"').rstrip("*") for p in include.group(1).split(",") if p.strip()}
    for entry in {"pyproject.toml"} | packages:
        assert f"!{entry}" in lines or f"!{entry}/" in lines, entry
