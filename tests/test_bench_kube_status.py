"""bench/kube_status.py at a tiny scale, as a check of its harness (not a measurement: `make
bench-kube-status` is): 50 workloads through the watcher's Kubernetes backend and kmock, and
the counts it prints add up."""

from __future__ import annotations

from pathlib import Path

from bench.kube_status import classify, render, run


def test_classify_names_verb_and_resource() -> None:
    assert classify("PATCH", "/apis/kueue.x-k8s.io/v1beta2/namespaces/b/workloads/w/status", False) == ("patch", "workloads/status")
    assert classify("GET", "/apis/batch/v1/namespaces/b/jobs", True) == ("watch", "jobs")
    assert classify("GET", "/apis/batch/v1/namespaces/b/jobs", False) == ("list", "jobs")
    assert classify("GET", "/apis/batch/v1/namespaces/b/jobs/j", False) == ("get", "jobs")
    assert classify("POST", "/api/v1/namespaces/b/events", False) == ("create", "events")
    assert classify("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", False) == ("list", "clusterqueues")


async def test_the_benchmark_counts_add_up(tmp_path: Path) -> None:
    """Every workload is admitted and its Workload status written once with Admitted (one
    create, one status patch: the two requests through the limiter), its Job unsuspended
    once, two Events each (QuotaReserved, Admitted) sent or still queued; every lag is
    positive."""
    figures = await run(50, qps=1000, burst=1500, give_up_after=20, data_dir=tmp_path)
    assert figures.written == 50
    requests = figures.requests
    assert requests["create", "workloads"] == requests["patch", "workloads/status"] == 50
    assert figures.limited == 100
    assert requests["patch", "jobs"] == 50
    # the recorder sends one Event at a time; the one in flight when the run stopped reached
    # the server but was never counted as sent
    assert requests["create", "events"] - figures.events_sent in (0, 1)
    assert requests["create", "events"] <= 100
    assert figures.events_dropped == 0
    assert all(lag > 0 for lag in figures.lags)
    assert "50 of 50" in render(figures)
