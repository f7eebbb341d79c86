"""Admission's Prometheus metrics."""

from prometheus_client import Counter, Histogram

ADMITTED = Counter(
    "berth_admission_admitted_total", "Workloads admitted (each admission).", ["cluster_queue"]
)
PASS_SECONDS = Histogram(
    "berth_admission_pass_seconds",
    "Duration of one scheduling pass.",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
)
