"""The watcher's Prometheus metrics."""

from prometheus_client import Counter

STARTED = Counter("berth_watcher_workloads_started_total", "Workloads started (each admission).")
FINISHED = Counter(
    "berth_watcher_workloads_finished_total", "Workloads that ran to completion.", ["result"]
)
EVICTED = Counter("berth_watcher_workloads_evicted_total", "Workloads stopped on eviction.")
