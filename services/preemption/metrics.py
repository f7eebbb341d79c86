"""The preemption service's Prometheus metrics: Kueue's under Berth's prefix, then its own."""

from prometheus_client import Counter, Histogram

# Kueue's kueue_preempted_workloads_total, same labels and reasons.
PREEMPTED = Counter(
    "berth_preempted_workloads_total",
    "Workloads preempted, per the preemptor's ClusterQueue and Kueue's reason (InClusterQueue,"
    " InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing).",
    ["preempting_cluster_queue", "reason"],
)
SEARCH_SECONDS = Histogram(
    "berth_preemption_search_seconds",
    "Duration of one victim search.",
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5),
)
