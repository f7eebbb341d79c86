"""Admission end to end on `berth up`: cohorts, borrowing, positions, live quota changes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import (
    condition,
    event_log,
    eventually,
    get_json,
    is_admitted,
    job_manifest,
    peak_usage,
    scrape,
    submit_manifest,
)


def _queues(url: str) -> dict[str, dict[str, Any]]:
    return {q["metadata"]["name"]: q for q in get_json(url, "clusterqueues")}


def test_seed_004_borrowing_positions_and_live_quota(stack: Stack, tmp_path: Path) -> None:
    """Team B borrows the shared CPUs; what does not fit waits with numbers and positions;
    lowering the quota evicts nothing; raising it admits at once; a busy CQ is not deleted."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed004-kueue-resources.yaml"), url=url)
    submit_manifest(
        url, tmp_path, job_manifest("b1", namespace="team-b", cpu=4, queue="local-queue")
    )
    submit_manifest(
        url, tmp_path, job_manifest("b2", namespace="team-b", cpu=4, queue="local-queue")
    )
    submit_manifest(
        url, tmp_path, job_manifest("b3", namespace="team-b", cpu=4, queue="local-queue")
    )

    def two_admitted() -> dict[str, dict[str, Any]]:
        workloads = {w["metadata"]["name"]: w for w in get_json(url, "workloads", "-n", "team-b")}
        assert [n for n, w in sorted(workloads.items()) if is_admitted(w)] == ["b1", "b2"]
        reserved = condition(workloads["b3"], "QuotaReserved")
        assert reserved is not None
        assert (
            "insufficient unused quota for cpu in flavor default-flavor, 2 more needed"
            in reserved["message"]
        )
        return workloads

    workloads = eventually(two_admitted)
    assert workloads["b3"]["status"]["berth"]["positionInClusterQueue"] == 0
    team_b = _queues(url)["team-b-cq"]["status"]
    cpu = next(r for f in team_b["flavorsUsage"] for r in f["resources"] if r["name"] == "cpu")
    assert cpu == {"name": "cpu", "total": "8", "borrowed": "8"}

    wide = berth("get", "workloads", "-n", "team-b", "-o", "wide", url=url).stdout
    assert "POSITION IN CQ" in wide and "2 more needed" in wide
    pending = berth("get", "pending", "team-b-cq", url=url).stdout
    assert "b3" in pending and "b1" not in pending
    local = {q["metadata"]["name"]: q for q in get_json(url, "localqueues", "-n", "team-b")}
    assert local["local-queue"]["status"]["admittedWorkloads"] == 2

    # Lower the shared quota under the usage: nothing is evicted by that alone.
    lowered = (
        (FIXTURES / "seed004-kueue-resources.yaml")
        .read_text()
        .replace(
            'name: "cpu"\n              nominalQuota: 10',
            'name: "cpu"\n              nominalQuota: 4',
        )
    )
    assert lowered != (FIXTURES / "seed004-kueue-resources.yaml").read_text()
    (tmp_path / "lowered.yaml").write_text(lowered)
    assert (
        "clusterqueue.kueue.x-k8s.io/shared-cq configured"
        in berth("apply", "-f", str(tmp_path / "lowered.yaml"), url=url).stdout
    )
    raised = lowered.replace(
        'name: "cpu"\n              nominalQuota: 4', 'name: "cpu"\n              nominalQuota: 12'
    )
    (tmp_path / "raised.yaml").write_text(raised)
    eventually(lambda: sum(is_admitted(w) for w in get_json(url, "workloads", "-n", "team-b")) == 2)
    berth("apply", "-f", str(tmp_path / "raised.yaml"), url=url)
    eventually(lambda: all(is_admitted(w) for w in get_json(url, "workloads", "-n", "team-b")))

    refused = berth("delete", "clusterqueue", "team-b-cq", url=url, check=False)
    assert refused.returncode != 0 and "3 workload(s) holding quota" in refused.stderr
    assert "team-b-cq" in _queues(url)

    events = event_log(url)
    from shared.events import WorkloadEvicted

    assert not [e for e in events if isinstance(e, WorkloadEvicted)]
    cohort = {"team-a-cq": "team-ab", "team-b-cq": "team-ab", "shared-cq": "team-ab"}
    assert peak_usage(events, groups=cohort)[("team-ab", "default-flavor", "cpu")] == 12_000


def test_namespace_selector_keeps_other_teams_out(stack: Stack, tmp_path: Path) -> None:
    """A ClusterQueue whose namespaceSelector does not match the namespace admits nothing."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed004-kueue-resources.yaml"), url=url)
    wrong = tmp_path / "lq.yaml"
    wrong.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: sneaky, namespace: team-b}\n"
        "spec: {clusterQueue: team-a-cq}\n"
    )
    berth("apply", "-f", str(wrong), url=url)
    submit_manifest(url, tmp_path, job_manifest("sneak", namespace="team-b", cpu=1, queue="sneaky"))

    def refused() -> bool:
        [workload] = get_json(url, "workloads", "-n", "team-b")
        reserved = condition(workload, "QuotaReserved")
        assert reserved is not None and "doesn't match ClusterQueue selector" in reserved["message"]
        return True

    eventually(refused)
    assert berth("delete", "localqueue", "sneaky", "-n", "team-b", url=url).stdout.strip() == (
        "localqueue.kueue.x-k8s.io/sneaky deleted"
    )


def test_wait_targets_put_a_job_that_is_due_before_a_higher_priority_one(
    stack: Stack, tmp_path: Path
) -> None:
    """Applied with `berth apply`: a low-priority job due at once queues ahead of a
    high-priority one due in an hour, and is admitted first; a bad target is refused with the
    field named, and the configuration in force stays."""
    url = stack.url
    setup = FIXTURES / "wait-targets.yaml"
    berth("apply", "-f", str(setup), url=url)
    submit_manifest(url, tmp_path, job_manifest("blocker", cpu=1))
    eventually(lambda: all(is_admitted(w) for w in get_json(url, "workloads")))
    submit_manifest(url, tmp_path, job_manifest("high", cpu=1, priority_class="high"))
    submit_manifest(url, tmp_path, job_manifest("low", cpu=1))

    def positions() -> dict[str, int]:
        workloads = {w["metadata"]["name"]: w for w in get_json(url, "workloads")}
        result = {
            n: workloads[n]["status"]["berth"].get("positionInClusterQueue") for n in workloads
        }
        assert result == {"blocker": None, "low": 0, "high": 1}
        return result

    eventually(positions)
    [low] = [w for w in get_json(url, "workloads") if w["metadata"]["name"] == "low"]
    assert low["status"]["berth"]["dueAt"] <= low["metadata"]["creationTimestamp"]  # due at once
    table = berth("get", "pending", "cq", url=url).stdout.splitlines()
    assert "DUE" in table[0].split()
    assert "high" in table[2] and re.search(r"in (59|60)m", table[2]), table  # due in an hour
    bad = tmp_path / "bad.yaml"
    bad.write_text(setup.read_text().replace("wait: 0s", "wait: now"))
    refused = berth("apply", "-f", str(bad), url=url, check=False)
    assert refused.returncode != 0
    assert "`spec.admission.waitTargets[1].wait`: invalid duration 'now'" in refused.stderr
    eventually(positions)  # the targets in force did not change

    berth("delete", "workload", "blocker", url=url)

    def admitted_names() -> list[str]:
        names = [w["metadata"]["name"] for w in get_json(url, "workloads") if is_admitted(w)]
        assert names
        return names

    assert eventually(admitted_names) == ["low"]
    metrics = scrape(stack, "admission")
    # The blocker and low were due at creation: admitted late; high is still queued.
    assert 'berth_admission_late_total{cluster_queue="cq"} 2.0' in metrics
    assert 'berth_admission_wait_time_seconds_count{cluster_queue="cq"} 2.0' in metrics
