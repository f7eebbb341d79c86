"""The preemption service's Prometheus metrics."""

from prometheus_client import Counter, Histogram

PREEMPTED = Counter(
    "berth_preemption_victims_total", "Workloads chosen as victims, by Kueue's reason.", ["reason"]
)
SEARCH_SECONDS = Histogram(
    "berth_preemption_search_seconds",
    "Duration of one victim search.",
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5),
)
