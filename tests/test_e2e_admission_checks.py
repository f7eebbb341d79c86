"""Admission checks and waitForPodsReady end to end on `berth up`, through the CLI only
(docs/admission-checks.md): a check that never answers holds the quota and starts nothing,
Rejected deactivates, Retry requeues and a later Ready starts it; a ClusterQueue whose
check does not exist is inactive; a ProvisioningRequest check is refused at apply; pods not
ready in time are evicted, requeued after a backoff, then deactivated past the limit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from shared.bus import KeyNotFound
from shared.events import (
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadPodsReady,
    WorkloadStarted,
    WorkloadSubmitted,
)
from tests.conftest import Stack, berth
from tests.e2e import (
    condition,
    event_log,
    eventually,
    first_at,
    get_json,
    is_admitted,
    job_manifest,
    objects_status,
    scrape,
    submit_manifest,
)
from tests.test_e2e_metrics import samples, value

CHECKED = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: budget}
spec: {controllerName: example.com/budget}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: checked-cq}
spec:
  namespaceSelector: {}
  admissionChecks: [budget]
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: user-queue, namespace: default}
spec: {clusterQueue: checked-cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: missing-check-cq}
spec:
  namespaceSelector: {}
  admissionChecks: [nobody-runs-this]
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 4}]
"""

PROVISIONING = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: prov}
spec: {controllerName: kueue.x-k8s.io/provisioning-request}
"""


def _workload(url: str, name: str) -> dict[str, Any]:
    return next(w for w in get_json(url, "workloads") if w["metadata"]["name"] == name)


def _checks(workload: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["state"] for c in workload["status"].get("admissionChecks", [])}


def _phase(url: str, name: str) -> str | None:
    """The local backend's phase of a workload, None if it never wrote one (never started)."""
    try:
        return objects_status(url, "default", name).get("phase")
    except KeyNotFound:  # no status: the watcher never started it
        return None


def _reserved_waiting(url: str, name: str) -> dict[str, Any]:
    workload = _workload(url, name)
    reserved = condition(workload, "QuotaReserved")
    admitted = condition(workload, "Admitted")
    assert reserved is not None and reserved["status"] == "True", workload["status"]
    assert admitted is not None and admitted["status"] == "False", workload["status"]
    assert _checks(workload) == {"budget": "Pending"}, workload["status"]
    return workload


def test_admission_checks_hold_reject_retry_and_admit(stack: Stack, tmp_path: Path) -> None:
    """One stack, each answer the issue lists, and the bad inputs it names."""
    url = stack.url
    config = tmp_path / "checked.yaml"
    config.write_text(CHECKED)
    berth("apply", "-f", str(config), url=url)
    assert "budget" in berth("get", "admissionchecks", url=url).stdout

    # A ProvisioningRequest check is refused at apply, saying why.
    provisioning = tmp_path / "prov.yaml"
    provisioning.write_text(PROVISIONING)
    refused = berth("apply", "-f", str(provisioning), url=url, check=False)
    assert refused.returncode != 0
    assert "need a cluster autoscaler and are not supported yet" in refused.stderr

    # A ClusterQueue whose check has no AdmissionCheck object is inactive, with the reason.
    def inactive() -> dict[str, Any]:
        queue = next(
            q for q in get_json(url, "clusterqueues") if q["metadata"]["name"] == "missing-check-cq"
        )
        active = condition(queue, "Active")
        assert active is not None and active["status"] == "False", queue["status"]
        assert active["reason"] == "AdmissionCheckNotFound", active
        return active

    eventually(inactive)

    for name in ("waiter", "rejected", "retried"):
        submit_manifest(url, tmp_path, job_manifest(name, cpu=1, command=["sleep", "600"]))

    # Never answered: quota reserved, not admitted, not started, shown in -o wide.
    for name in ("waiter", "rejected", "retried"):
        eventually(lambda name=name: _reserved_waiting(url, name), timeout=60)  # type: ignore[misc]
    wide = berth("get", "workloads", "-o", "wide", url=url).stdout
    waiter_line = next(line for line in wide.splitlines() if line.startswith("waiter"))
    assert "checked-cq" in waiter_line and "budget=Pending" in waiter_line, wide
    assert "not all checks ready" in waiter_line, wide
    described = berth("describe", "workload", "waiter", url=url).stdout
    checks_table = described[described.index("Admission Checks:") :]
    assert "budget" in checks_table and "Pending" in checks_table, described

    # Bad answers are refused, naming the problem.
    unknown = berth("admissioncheck", "set", "waiter", "other", "Ready", url=url, check=False)
    assert unknown.returncode != 0 and 'does not wait for admission check "other"' in unknown.stderr
    missing = berth("admissioncheck", "set", "ghost", "budget", "Ready", url=url, check=False)
    assert missing.returncode != 0 and 'workload "ghost" not found' in missing.stderr

    # Rejected: evicted, deactivated, the check and its message in the reason.
    berth(
        "admissioncheck", "set", "rejected", "budget", "Rejected", "--message", "no budget", url=url
    )

    def deactivated() -> dict[str, Any]:
        evicted = condition(_workload(url, "rejected"), "Evicted")
        assert evicted is not None, evicted
        assert evicted["reason"] == "DeactivatedDueToAdmissionCheck", evicted
        assert '"budget" (no budget)' in evicted["message"], evicted
        quota = condition(_workload(url, "rejected"), "QuotaReserved")
        assert quota is not None and quota["status"] == "False", quota
        return evicted

    eventually(deactivated, timeout=60)

    # Retry: the quota is released and it is reserved again (a new reservation, checks
    # Pending), then Ready on it admits and starts it.
    berth("admissioncheck", "set", "retried", "budget", "Retry", "--requeue-after", "1", url=url)

    def retried() -> dict[str, Any]:
        workload = _workload(url, "retried")
        assert workload["status"].get("requeueState", {}).get("count", 0) >= 1, workload["status"]
        return _reserved_waiting(url, "retried")  # reserved again, its check Pending again

    eventually(retried, timeout=60)
    berth("admissioncheck", "set", "retried", "budget", "Ready", url=url)
    eventually(lambda: is_admitted(_workload(url, "retried")), timeout=60)
    eventually(lambda: _phase(url, "retried") == "Running")

    # The one never answered still holds its quota and was never started.
    _reserved_waiting(url, "waiter")
    assert _phase(url, "waiter") is None, "a reservation waiting for its checks never starts"
    # And the rejected one was not queued again (2 of 4 CPUs are free for it).
    assert not is_admitted(_workload(url, "rejected"))
    assert condition(_workload(url, "rejected"), "QuotaReserved")["status"] == "False"  # type: ignore[index]

    # The stream says the same, in order: the Retry evicted reservation 1 with a requeue time
    # (reason AdmissionCheck), reservation 2 was admitted, and only it was started.
    events = [e for e in event_log(url) if e.workload.name == "retried"]
    evictions = [e for e in events if isinstance(e, EvictionRequested)]
    assert [(e.reason, e.generation, e.requeue_at is not None) for e in evictions] == [
        ("AdmissionCheck", 1, True)
    ]
    admissions = [
        (e.generation, e.reserved_only) for e in events if isinstance(e, WorkloadAdmitted)
    ]
    assert admissions == [(1, True), (2, True), (2, False)], admissions
    assert [e.generation for e in events if isinstance(e, WorkloadStarted)] == [2]

    # Kueue's metrics: four reservations (waiter, rejected, retried twice), one admission,
    # whose wait for its checks is observed once.
    admission = samples(scrape(stack, "admission"))
    cq = {"cluster_queue": "checked-cq"}
    assert value(admission, "berth_quota_reserved_workloads_total", **cq) == 4
    assert value(admission, "berth_admitted_workloads_total", **cq) == 1
    assert value(admission, "berth_admission_checks_wait_time_seconds_count", **cq) == 1


PODS_READY = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cluster-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: user-queue, namespace: default}
spec: {clusterQueue: cluster-queue}
---
apiVersion: berth.dev/v1alpha1
kind: Configuration
metadata: {name: berth}
spec:
  waitForPodsReady:
    enable: true
    timeout: 3s
    blockAdmission: false
    requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 1, backoffMaxSeconds: 10}
"""


def test_pods_not_ready_in_time_are_evicted_requeued_then_deactivated(
    stack: Stack, tmp_path: Path
) -> None:
    """A container whose readiness probe never passes: evicted for PodsReadyTimeout,
    requeued after the backoff (admitted again), then over backoffLimitCount deactivated;
    a plain one is ready at start and keeps running."""
    url = stack.url
    config = tmp_path / "ready.yaml"
    config.write_text(PODS_READY)
    berth("apply", "-f", str(config), url=url)
    never = job_manifest("never-ready", cpu=1, command=["sleep", "600"])
    container = never["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"] = {"exec": {"command": ["false"]}, "periodSeconds": 1}
    submit_manifest(url, tmp_path, never)
    submit_manifest(url, tmp_path, job_manifest("ready", cpu=1, command=["sleep", "600"]))

    def limit_exceeded() -> dict[str, Any]:
        workload = _workload(url, "never-ready")
        evicted = condition(workload, "Evicted")
        assert evicted is not None, evicted
        assert evicted["reason"] == "DeactivatedDueToRequeuingLimitExceeded", evicted
        # It was requeued once (admitted a second time) before the limit deactivated it.
        assert workload["status"]["requeueState"]["count"] == 2, workload["status"]
        return workload

    eventually(limit_exceeded, timeout=60)
    time.sleep(2)  # a requeue would have admitted it again by now (the backoff is 1-2 s)
    assert not is_admitted(_workload(url, "never-ready"))
    ready = _workload(url, "ready")
    assert is_admitted(ready) and condition(ready, "Evicted") is None, ready["status"]

    # The stream: a PodsReadyTimeout eviction with a requeue time, then the limit's.
    events = [e for e in event_log(url) if e.workload.name == "never-ready"]
    evictions = [
        (e.reason, e.generation, e.requeue_at is not None, e.deactivated)
        for e in events
        if isinstance(e, EvictionRequested)
    ]
    assert evictions == [
        ("PodsReadyTimeout", 1, True, False),
        ("DeactivatedDueToRequeuingLimitExceeded", 2, False, True),
    ], evictions
    ready_facts = [e for e in event_log(url) if isinstance(e, WorkloadPodsReady)]
    assert [e.workload.name for e in ready_facts] == ["ready"], "only the plain one is ready"
    admission = samples(scrape(stack, "admission"))
    cq = {"cluster_queue": "cluster-queue"}
    assert value(admission, "berth_admitted_until_ready_wait_time_seconds_count", **cq) == 1
    assert value(admission, "berth_evicted_workloads_total", reason="PodsReadyTimeout", **cq) == 1


# Its 3 s timeout is long enough that the second workload is submitted while the first waits
# (the test checks that it was, from the stream): 0.3 s after the first's admission at load 5.
BLOCKING = PODS_READY.replace("    blockAdmission: false\n", "").replace(
    "backoffLimitCount: 1", "backoffLimitCount: 0"
)


def test_block_admission_holds_the_next_workload_until_the_first_is_ready_or_out(
    stack: Stack, tmp_path: Path
) -> None:
    """blockAdmission (the default with enable): a second workload is admitted only after the
    first, never ready, was evicted for its timeout (deactivated at once: limit 0)."""
    url = stack.url
    assert "blockAdmission" not in BLOCKING and "timeout: 3s" in BLOCKING
    config = tmp_path / "block.yaml"
    config.write_text(BLOCKING)
    berth("apply", "-f", str(config), url=url)
    never = job_manifest("never-ready", cpu=1, command=["sleep", "600"])
    container = never["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"] = {"exec": {"command": ["false"]}, "periodSeconds": 1}
    submit_manifest(url, tmp_path, never)
    eventually(lambda: is_admitted(_workload(url, "never-ready")), timeout=60)
    submit_manifest(url, tmp_path, job_manifest("next", cpu=1, command=["sleep", "600"]))
    eventually(lambda: is_admitted(_workload(url, "next")), timeout=60)

    events = event_log(url)
    timeout_at = first_at(events, EvictionRequested, "never-ready")
    next_submitted_at = first_at(events, WorkloadSubmitted, "next")
    next_admitted_at = first_at(events, WorkloadAdmitted, "next")
    assert next_submitted_at < timeout_at, "submitted only once the first was out: no test"
    assert next_admitted_at > timeout_at, "admitted while the first's pods were not ready"
    eviction = events[timeout_at]
    assert isinstance(eviction, EvictionRequested)
    assert eviction.reason == "DeactivatedDueToRequeuingLimitExceeded"
