"""docs/metrics.md is generated from the metrics the code registers; this test fails when
the page drifts. Rewrite it with `.venv/bin/python -m tests.test_metrics_doc`.

It also holds Kueue's side of the contract: a metric named as Kueue's (``berth_X`` for
``kueue_X``) has Kueue's labels, in Kueue's order (pkg/metrics/metrics.go).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

import services
import shared
from shared.metrics import StateGauges

PAGE = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"

# Kueue's metrics (kueue_<name>) and their labels, from pkg/metrics/metrics.go.
_CQ, _LQ = ("cluster_queue",), ("name", "namespace")
_CQ_RESOURCE = ("cohort", "cluster_queue", "flavor", "resource")
_LQ_RESOURCE = ("name", "namespace", "flavor", "resource")
KUEUE: dict[str, tuple[str, ...]] = {
    "admission_attempts_total": ("result",),
    "admission_attempt_duration_seconds": ("result",),
    "pending_workloads": ("cluster_queue", "status"),
    "quota_reserved_workloads_total": _CQ,
    "quota_reserved_wait_time_seconds": _CQ,
    "admitted_workloads_total": _CQ,
    "admission_wait_time_seconds": _CQ,
    "admission_checks_wait_time_seconds": _CQ,
    "ready_wait_time_seconds": _CQ,
    "admitted_until_ready_wait_time_seconds": _CQ,
    "local_queue_ready_wait_time_seconds": _LQ,
    "local_queue_admitted_until_ready_wait_time_seconds": _LQ,
    "local_queue_admission_checks_wait_time_seconds": _LQ,
    "evicted_workloads_total": ("cluster_queue", "reason"),
    "preempted_workloads_total": ("preempting_cluster_queue", "reason"),
    "reserving_active_workloads": _CQ,
    "admitted_active_workloads": _CQ,
    "cluster_queue_status": ("cluster_queue", "status"),
    "cluster_queue_resource_reservation": _CQ_RESOURCE,
    "cluster_queue_resource_usage": _CQ_RESOURCE,
    "cluster_queue_nominal_quota": _CQ_RESOURCE,
    "cluster_queue_borrowing_limit": _CQ_RESOURCE,
    "cluster_queue_lending_limit": _CQ_RESOURCE,
    "local_queue_pending_workloads": ("name", "namespace", "status"),
    "local_queue_quota_reserved_workloads_total": _LQ,
    "local_queue_quota_reserved_wait_time_seconds": _LQ,
    "local_queue_admitted_workloads_total": _LQ,
    "local_queue_admission_wait_time_seconds": _LQ,
    "local_queue_evicted_workloads_total": ("name", "namespace", "reason"),
    "local_queue_reserving_active_workloads": _LQ,
    "local_queue_admitted_active_workloads": _LQ,
    "local_queue_status": ("name", "namespace", "active"),
    "local_queue_resource_reservation": _LQ_RESOURCE,
    "local_queue_resource_usage": _LQ_RESOURCE,
    # Kueue adds replica_role to both (which replica reports): Berth's queue gauges come
    # from the deciding replica only, so there is nothing to tell apart.
    "cluster_queue_weighted_share": ("cluster_queue", "cohort"),
    "cohort_weighted_share": ("cohort",),
    "local_queue_admission_fair_sharing_usage": ("name", "namespace", "cluster_queue"),
}
# Kueue's metrics Berth does not serve, and why.
NOT_SERVED = {
    "admission_cycle_preemption_skips": "one pass admits everything that fits; nothing is skipped for another ClusterQueue in the same cycle",
    "evicted_workloads_once_total": "not yet: evicted_workloads_total counts every eviction",
    "build_info / version": "`berth version` and the package metadata",
}


@dataclass(frozen=True)
class Documented:
    name: str  # as scraped (a counter's _total included)
    kind: str
    labels: tuple[str, ...]
    help: str
    module: str


def _modules() -> list[str]:
    """Every module of shared/ and services/ (not the entry points)."""
    names = []
    for package in (shared, services):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return sorted(names)


def registered() -> list[Documented]:
    """Every berth_ metric defined at module level in shared/ and services/."""
    found: dict[str, Documented] = {}
    for module_name in _modules():
        module = importlib.import_module(module_name)
        source = Path(module.__file__ or "").read_text()
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                # prometheus_client keeps these on the metric; it has no public accessor.
                kind = value._type
                name = value._name + ("_total" if kind == "counter" else "")
                entries = [(name, kind, tuple(value._labelnames), value._documentation)]
            elif isinstance(value, StateGauges):
                entries = [(s.name, "gauge", s.labels, s.documentation) for s in value.specs]
            else:
                continue
            for name, kind, labels, text in entries:
                defined_here = f'"{name.removesuffix("_total")}' in source
                if name.startswith("berth_") and (defined_here or name not in found):
                    found[name] = Documented(name, kind, labels, text, module_name)
    return sorted(found.values(), key=lambda m: m.name)


def _served_by(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "services" else "every service"


def _row(metric: Documented) -> str:
    labels = ", ".join(f"`{label}`" for label in metric.labels) or "-"
    return f"| `{metric.name}` | {metric.kind} | {labels} | {_served_by(metric.module)} | {metric.help} |"


def render() -> str:
    metrics = registered()
    kueue = [m for m in metrics if m.name.removeprefix("berth_") in KUEUE]
    own = [m for m in metrics if m.name.removeprefix("berth_") not in KUEUE]
    header = ["| metric | type | labels | served by | meaning |", "|---|---|---|---|---|"]
    lines = [
        "# Berth's metrics",
        "",
        "Each service serves Prometheus text on `/metrics` (its HTTP port: `berth up` prints them;",
        "8481-8484 by default). This page is generated from the code by `tests/test_metrics_doc.py`",
        "(`.venv/bin/python -m tests.test_metrics_doc` rewrites it; the test fails when it drifts).",
        "",
        "## Kueue's metrics, under Berth's prefix",
        "",
        "`kueue_<name>` is `berth_<name>` with Kueue's labels and meaning, so a Kueue dashboard",
        "needs only its prefix changed (deploy/monitoring/grafana-dashboard.json is one). Quantities",
        "are in base units as Kueue reports them (CPU in cores, memory in bytes). Queue gauges are",
        "read from admission's memory when Prometheus scrapes, and only from the replica that",
        "decides; counters start at zero when a service starts (Prometheus's `rate()` handles it).",
        "",
        *header,
        *(_row(m) for m in kueue),
        "",
        "Kueue's metrics Berth does not serve:",
        "",
        "| Kueue metric | why |",
        "|---|---|",
        *(f"| `kueue_{name}` | {why} |" for name, why in NOT_SERVED.items()),
        "",
        "## Berth's own",
        "",
        "Managed jobs, ageing, the bus (per consumer: how far behind the stream it is), dead",
        "letters, fencing, and each service's own work.",
        "",
        *header,
        *(_row(m) for m in own),
        "",
    ]
    return "\n".join(lines)


def test_page_is_generated_from_the_code() -> None:
    """docs/metrics.md lists every registered metric (name, type, labels, help)."""
    assert PAGE.read_text() == render(), "run: .venv/bin/python -m tests.test_metrics_doc"


def test_kueue_names_have_kueue_labels() -> None:
    """A metric named as Kueue's carries Kueue's labels, in Kueue's order."""
    for metric in registered():
        expected = KUEUE.get(metric.name.removeprefix("berth_"))
        if expected is not None:
            assert metric.labels == expected, metric.name


def test_required_kueue_metrics_are_served() -> None:
    """Every Kueue metric the table names is registered under berth_."""
    names = {metric.name for metric in registered()}
    assert {f"berth_{name}" for name in KUEUE} <= names
    assert not set(KUEUE) & set(NOT_SERVED), "a served metric is listed as not served"


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
