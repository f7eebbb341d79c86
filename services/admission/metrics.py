"""Admission's Prometheus metrics."""

from prometheus_client import Counter, Histogram

ADMITTED = Counter(
    "berth_admission_admitted_total", "Workloads admitted (each admission).", ["cluster_queue"]
)
# Kueue's kueue_admission_wait_time_seconds: from queue time to each admission.
WAIT_SECONDS = Histogram(
    "berth_admission_wait_seconds",
    "Time from queue time (creation, kept across evictions) to admission.",
    ["cluster_queue"],
    buckets=(0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0),
)
LATE = Counter(
    "berth_admission_late_total",
    "Admissions after the workload's deadline (Configuration.spec.admission.waitTargets).",
    ["cluster_queue"],
)
PASS_SECONDS = Histogram(
    "berth_admission_pass_seconds",
    "Duration of one scheduling pass.",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
)
# Facts refused before they reach the quota books (services/admission/validation.py).
REFUSED_FACTS = Counter(
    "berth_admission_refused_facts_total",
    "Workload facts refused as malformed (never folded into quota), by reason.",
    ["reason"],
)
