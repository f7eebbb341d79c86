"""Every kustomization under deploy/ renders, validates against the Kubernetes schemas it
promises, and agrees with `kubectl kustomize`; every YAML file is listed; every namespaced
object lives in berth-system."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy_manifests import (
    BASE,
    CERT_MANAGER,
    CLUSTER_SCOPED,
    CLUSTER_WIDE,
    DEPLOY,
    NAMESPACE,
    PLAIN_KUSTOMIZATIONS,
    Manifest,
    fixture_manifests,  # noqa: F401 - a fixture, requested by name
    load_yaml_documents,
    manifest_key,
    one_of,
    rel,
    render,
    render_base,
    render_with_kubectl,
    validation_failures,
)


@pytest.mark.parametrize("kustomization", PLAIN_KUSTOMIZATIONS, ids=rel)
def test_every_rendered_manifest_validates_against_kubernetes_schemas(kustomization: Path) -> None:
    """Every Kubernetes object each kustomization renders validates strictly (no unknown
    fields) for Kubernetes 1.30 and for the newest version kubernetes-validate bundles."""
    rendered = render(kustomization)
    assert rendered, f"{rel(kustomization)} rendered nothing"
    failures = validation_failures(rendered)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("kustomization", PLAIN_KUSTOMIZATIONS, ids=rel)
def test_python_renderer_matches_kubectl_kustomize(kustomization: Path) -> None:
    """The in-test renderer produces exactly what `kubectl kustomize` produces."""
    from_kubectl = render_with_kubectl(kustomization)
    if from_kubectl is None:
        pytest.skip("kubectl is not installed; manifests were rendered by render_base only")
    from_python = render_base(kustomization)
    assert sorted(map(manifest_key, from_python)) == sorted(map(manifest_key, from_kubectl))
    by_key = {manifest_key(m): m for m in from_kubectl}
    for manifest in from_python:
        assert manifest == by_key[manifest_key(manifest)], f"{manifest_key(manifest)} differs"


@pytest.mark.parametrize(
    "kustomization", [BASE, CERT_MANAGER, DEPLOY / "managed-namespace", CLUSTER_WIDE], ids=rel
)
def test_every_yaml_file_is_listed_and_loads(kustomization: Path) -> None:
    """Every YAML file in a kustomization directory parses and is listed in its resources."""
    listed = yaml.safe_load((kustomization / "kustomization.yaml").read_text())["resources"]
    on_disk = {p.name for p in kustomization.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(listed)
    for name in on_disk:
        assert load_yaml_documents(kustomization / name), f"{name} holds no document"


def test_all_namespaced_objects_live_in_berth_system(manifests: list[Manifest]) -> None:
    """The base creates the berth-system Namespace and puts every namespaced object in it."""
    assert one_of(manifests, "Namespace", NAMESPACE)
    for manifest in manifests:
        if manifest["kind"] not in CLUSTER_SCOPED:
            assert manifest["metadata"].get("namespace") == NAMESPACE, manifest_key(manifest)
