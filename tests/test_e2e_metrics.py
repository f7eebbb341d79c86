"""Every service's /metrics through a preemption on `berth up`: seed 001's managed jobs (a
high-priority job preempts a running low one, which recovers), scraped while the low job
waits and again once both succeeded; each metric is found with its labels and value."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import eventually, scrape

SEED_001 = FIXTURES / "seed001"
CQ = {"cluster_queue": "cluster-queue"}
LQ = {"name": "default", "namespace": "default"}
CPU = {
    "cohort": "",
    "cluster_queue": "cluster-queue",
    "flavor": "default-flavor",
    "resource": "cpu",
}
MEMORY = {**CPU, "resource": "memory"}
LQ_CPU = {**LQ, "flavor": "default-flavor", "resource": "cpu"}

# Fast ageing so that the waiting job is boosted within a second (docs/ageing.md).
AGEING = """
apiVersion: berth.dev/v1alpha1
kind: ClusterQueuePolicy
metadata: {name: fast-ageing}
spec:
  ageing: {priorityPerMinute: 600, maxBoost: 50}
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: Samples, metric: str, /, **labels: str) -> float | None:
    return scraped.get((metric, frozenset(labels.items())))


def _statuses(url: str) -> list[str]:
    return [
        job["status"] for job in json.loads(berth("jobs", "queue", "-o", "json", url=url).stdout)
    ]


# While the high job runs and the low one waits: (service, metric, labels, value, why).
WAITING = [
    (
        "admission",
        "berth_pending_workloads",
        {**CQ, "status": "inadmissible"},
        1.0,
        "low was tried and set aside",
    ),
    (
        "admission",
        "berth_pending_workloads",
        {**CQ, "status": "active"},
        0.0,
        "nothing else queued",
    ),
    (
        "admission",
        "berth_local_queue_pending_workloads",
        {**LQ, "status": "inadmissible"},
        1.0,
        "per LocalQueue too",
    ),
    ("admission", "berth_reserving_active_workloads", CQ, 1.0, "high holds quota"),
    ("admission", "berth_admitted_active_workloads", CQ, 1.0, "and is admitted"),
    ("admission", "berth_local_queue_reserving_active_workloads", LQ, 1.0, "per LocalQueue"),
    ("admission", "berth_cluster_queue_resource_usage", CPU, 4.0, "high's 4 CPUs, in cores"),
    ("admission", "berth_cluster_queue_resource_reservation", CPU, 4.0, "reserved = used"),
    ("admission", "berth_local_queue_resource_usage", LQ_CPU, 4.0, "per LocalQueue"),
    (
        "admission",
        "berth_evicted_workloads_total",
        {**CQ, "reason": "Preempted"},
        1.0,
        "low was evicted",
    ),
    (
        "admission",
        "berth_local_queue_evicted_workloads_total",
        {**LQ, "reason": "Preempted"},
        1.0,
        "per LocalQueue",
    ),
    (
        "preemption",
        "berth_preempted_workloads_total",
        {"preempting_cluster_queue": "cluster-queue", "reason": "InClusterQueue"},
        1.0,
        "Kueue's reason",
    ),
    ("recovery", "berth_managed_jobs", {"status": "RECOVERING"}, 1.0, "low waits to run again"),
    ("recovery", "berth_managed_jobs", {"status": "RUNNING"}, 1.0, "high runs"),
    ("recovery", "berth_managed_job_recoveries_total", {}, 1.0, "one preemption"),
]

# Once both succeeded.
DONE = [
    ("admission", "berth_admitted_workloads_total", CQ, 3.0, "low, high, low again"),
    ("admission", "berth_quota_reserved_workloads_total", CQ, 3.0, "a reservation is an admission"),
    ("admission", "berth_admission_wait_time_seconds_count", CQ, 3.0, "one wait per admission"),
    ("admission", "berth_quota_reserved_wait_time_seconds_count", CQ, 3.0, "the same waits"),
    ("admission", "berth_local_queue_admitted_workloads_total", LQ, 3.0, "per LocalQueue"),
    ("admission", "berth_local_queue_admission_wait_time_seconds_count", LQ, 3.0, "per LocalQueue"),
    (
        "admission",
        "berth_pending_workloads",
        {**CQ, "status": "inadmissible"},
        0.0,
        "nothing waits",
    ),
    ("admission", "berth_reserving_active_workloads", CQ, 0.0, "nothing holds quota"),
    ("admission", "berth_cluster_queue_resource_usage", CPU, 0.0, "all released"),
    ("admission", "berth_cluster_queue_nominal_quota", CPU, 4.0, "4 CPUs"),
    ("admission", "berth_cluster_queue_nominal_quota", MEMORY, 16 * 2**30, "16Gi in bytes"),
    ("admission", "berth_cluster_queue_status", {**CQ, "status": "active"}, 1.0, "it admits"),
    (
        "admission",
        "berth_cluster_queue_status",
        {**CQ, "status": "pending"},
        0.0,
        "one status at 1",
    ),
    ("admission", "berth_local_queue_status", {**LQ, "active": "True"}, 1.0, "it takes workloads"),
    ("recovery", "berth_managed_jobs", {"status": "SUCCEEDED"}, 2.0, "both done"),
    ("recovery", "berth_managed_jobs", {"status": "RECOVERING"}, 0.0, "every status reported"),
    ("recovery", "berth_managed_job_recovering_seconds_count", {}, 1.0, "low left RECOVERING once"),
    ("watcher", "berth_watcher_workloads_started_total", {}, 3.0, "three runs"),
    ("watcher", "berth_watcher_workloads_evicted_total", {}, 1.0, "one stopped"),
    (
        "watcher",
        "berth_watcher_workloads_finished_total",
        {"result": "Succeeded"},
        2.0,
        "high, then low's second run; the stopped run never finished",
    ),
]


def test_metrics_through_a_preemption(stack: Stack, tmp_path: Path) -> None:
    """Kueue's metrics under berth_ and Berth's own, with the labels and values the
    scenario implies, on the service that serves each."""
    url = stack.url
    policy = tmp_path / "ageing.yaml"
    policy.write_text(AGEING)
    for path in (SEED_001 / "cluster.yaml", SEED_001 / "priorities.yaml", policy):
        berth("apply", "-f", str(path), url=url)
    berth("jobs", "launch", str(SEED_001 / "low-priority-job.yaml"), url=url)
    eventually(lambda: _statuses(url) == ["RUNNING"])
    berth("jobs", "launch", str(SEED_001 / "high-priority-job.yaml"), url=url)

    def check(cases: list[tuple[str, str, dict[str, str], float, str]]) -> bool:
        scraped = {service: samples(scrape(stack, service)) for service in {c[0] for c in cases}}
        for service, name, labels, expected, reason in cases:
            found = value(scraped[service], name, **labels)
            assert found == expected, (
                f"{service}: {name}{labels} = {found}, not {expected}: {reason}"
            )
        return True

    eventually(lambda: check(WAITING), timeout=30)

    def boosted() -> bool:
        text = scrape(stack, "recovery")
        found = value(
            samples(text),
            "berth_ageing_boosts_total",
            cluster_queue="cluster-queue",
            reserved="false",
        )
        assert (found or 0) >= 1, [line for line in text.splitlines() if "boost" in line]
        return True

    eventually(boosted, timeout=10)  # the ageing tick is a second
    eventually(lambda: sorted(_statuses(url)) == ["SUCCEEDED", "SUCCEEDED"], timeout=60)
    eventually(lambda: check(DONE), timeout=10)

    admission = samples(scrape(stack, "admission"))
    assert (value(admission, "berth_admission_attempts_total", result="success") or 0) >= 3
    assert (
        value(admission, "berth_admission_attempt_duration_seconds_count", result="success") or 0
    ) >= 3
    preemption = samples(scrape(stack, "preemption"))
    assert (value(preemption, "berth_preemption_search_seconds_count") or 0) >= 1
    for service in ("watcher", "admission", "preemption", "recovery"):
        lag = samples(scrape(stack, service))
        assert value(lag, "berth_bus_consumer_pending_messages", consumer=service) is not None, (
            service
        )
        assert (
            value(lag, "berth_bus_consumer_ack_pending_messages", consumer=service) is not None
        ), service
