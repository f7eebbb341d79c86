"""deploy/monitoring: the ServiceMonitor finds the four services, and every metric the Grafana
dashboard queries is one the code registers (with prefix kueue, one Kueue serves)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.service import DEFAULT_PORTS
from tests.test_metrics_doc import KUEUE, registered

MONITORING = Path(__file__).resolve().parents[1] / "deploy" / "monitoring"
BASE = MONITORING.parent / "base"
_METRIC = re.compile(r"(?:\$\{prefix\}|berth)_[a-z_]+")
_SERIES = ("_bucket", "_sum", "_count")


def _dashboard() -> dict[str, Any]:
    return dict(json.loads((MONITORING / "grafana-dashboard.json").read_text()))


def _expressions() -> list[str]:
    return [
        target["expr"] for panel in _dashboard()["panels"] for target in panel.get("targets", [])
    ]


def _metric(name: str) -> str:
    for suffix in _SERIES:
        if name.endswith(suffix) and not name.endswith("_total"):
            return name.removesuffix(suffix)
    return name


def test_dashboard_queries_registered_metrics() -> None:
    """Each metric a panel reads exists in the code, under the prefix it is read with."""
    known = {metric.name for metric in registered()}
    used = {
        _metric(name.replace("${prefix}", "berth"))
        for e in _expressions()
        for name in _METRIC.findall(e)
    }
    assert used and used <= known, sorted(used - known)


def test_dashboard_prefix_reads_kueue() -> None:
    """The panels written with ${prefix} read only Kueue's metrics, so prefix=kueue shows a
    Kueue installation."""
    prefixed = {
        _metric(name)
        for e in _expressions()
        for name in _METRIC.findall(e)
        if name.startswith("${prefix}")
    }
    assert prefixed and {name.removeprefix("${prefix}_") for name in prefixed} <= set(KUEUE)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_service_monitor_selects_the_four_services() -> None:
    """Its selector matches exactly the services' Services in deploy/base, on a port they have."""
    [monitor] = _documents(MONITORING / "servicemonitor.yaml")
    selector = monitor["spec"]["selector"]
    [expression] = selector["matchExpressions"]
    port = monitor["spec"]["endpoints"][0]["port"]
    selected = []
    for path in sorted(BASE.glob("*.yaml")):
        for doc in _documents(path):
            labels = doc.get("metadata", {}).get("labels", {})
            if (
                doc.get("kind") != "Service"
                or not selector["matchLabels"].items() <= labels.items()
            ):
                continue
            if labels.get(expression["key"]) in expression["values"]:
                assert port in {p["name"] for p in doc["spec"]["ports"]}, doc["metadata"]["name"]
                selected.append(labels[expression["key"]])
    assert sorted(selected) == sorted(DEFAULT_PORTS)


def test_kustomization_renders() -> None:
    """kubectl kustomize deploy/monitoring: the ServiceMonitor and the dashboard's ConfigMap."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(MONITORING)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rendered = {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if doc}
    assert set(rendered) == {"ServiceMonitor", "ConfigMap"}
    config_map = rendered["ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["grafana-dashboard.json"]) == _dashboard()
