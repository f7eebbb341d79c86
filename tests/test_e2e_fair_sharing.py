"""On `berth up`: fair sharing orders admission across the ClusterQueues of a cohort."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.conftest import Stack, berth
from tests.e2e import (
    condition,
    eventually,
    get_json,
    is_admitted,
    job_manifest,
    pid_alive,
    submit_manifest,
)

V1 = "kueue.x-k8s.io/v1beta1"


def _setup(fair: bool) -> list[dict[str, Any]]:
    """alpha and beta own no quota and borrow everything from lender's 6 CPUs."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "berth"},
            "spec": {"fairSharing": {"enable": fair}},
        },
    ]
    for name, cpu in (("alpha", 0), ("beta", 0), ("lender", 6)):
        objects.append(
            {
                "apiVersion": V1,
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "cohort": "shared",
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [{"name": "cpu", "nominalQuota": cpu}],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        objects.append(
            {
                "apiVersion": V1,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"clusterQueue": name},
            }
        )
    return objects


def _held(name: str, cpu: int, queue: str, go: Path) -> dict[str, Any]:
    """A Job that runs until the file ``go`` exists."""
    command = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.1; done"]
    return job_manifest(name, cpu=cpu, queue=queue, command=command)


def _workloads(url: str) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in get_json(url, "workloads")}


def test_the_cluster_queue_with_the_lower_share_admits_first(stack: Stack, tmp_path: Path) -> None:
    """alpha already borrows 2 of the cohort's 6 CPUs; when 4 free up, beta's newer head is
    admitted before alpha's older one (alpha would borrow 6/6, beta 4/6), and
    `get clusterqueues -o wide` shows each weightedShare."""
    url = stack.url
    (tmp_path / "setup.yaml").write_text(
        "\n---\n".join(json.dumps(document) for document in _setup(fair=True))
    )
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    submit_manifest(url, tmp_path, job_manifest("a1", cpu=2, queue="alpha"))
    eventually(lambda: is_admitted(_workloads(url)["a1"]), timeout=60)
    go = tmp_path / "go"
    submit_manifest(url, tmp_path, _held("filler", 4, "lender", go))
    eventually(lambda: is_admitted(_workloads(url)["filler"]), timeout=60)
    submit_manifest(url, tmp_path, job_manifest("a2", cpu=4, queue="alpha"))
    submit_manifest(url, tmp_path, job_manifest("b1", cpu=4, queue="beta"))

    def both_pending() -> bool:
        rows = {p["name"] for p in get_json(url, "pending", "alpha")}
        rows |= {p["name"] for p in get_json(url, "pending", "beta")}
        return rows == {"a2", "b1"}

    eventually(both_pending, timeout=60)
    go.touch()  # the filler ends: 4 CPUs free, room for one of the two

    def one_admitted() -> dict[str, dict[str, Any]]:
        workloads = _workloads(url)
        admitted = {name for name in ("a2", "b1") if is_admitted(workloads[name])}
        assert admitted, "neither admitted yet"
        return workloads

    workloads = eventually(one_admitted, timeout=60)
    assert is_admitted(workloads["b1"]) and not is_admitted(workloads["a2"])

    shares = {
        q["metadata"]["name"]: q["status"]["fairSharing"]["weightedShare"]
        for q in get_json(url, "clusterqueues")
    }
    # alpha borrows 2 of 6 (333.3, rounded up), beta 4 of 6, lender nothing.
    assert shares == {"alpha": 334, "beta": 667, "lender": 0}
    wide = berth("get", "clusterqueues", "-o", "wide", url=url).stdout.splitlines()
    assert "WEIGHTED SHARE" in wide[0]
    rows = {line.split()[0]: line.split() for line in wide[1:]}
    assert rows["alpha"][-1] == "334" and rows["beta"][-1] == "667"
    described = berth("describe", "clusterqueue", "beta", url=url).stdout
    assert "Weighted Share:       667" in described


def test_a_negative_local_queue_weight_is_refused_at_apply(stack: Stack, tmp_path: Path) -> None:
    """berth apply refuses a negative fairSharing.weight, naming the field, and stores nothing."""
    url = stack.url
    bad = {
        "apiVersion": V1,
        "kind": "LocalQueue",
        "metadata": {"name": "heavy", "namespace": "default"},
        "spec": {"clusterQueue": "alpha", "fairSharing": {"weight": "-1"}},
    }
    (tmp_path / "bad.yaml").write_text(json.dumps(bad))
    result = berth("apply", "-f", str(tmp_path / "bad.yaml"), url=url, check=False)
    assert result.returncode != 0
    assert "`spec.fairSharing.weight`: quantity '-1' is negative" in result.stderr
    assert [q["metadata"]["name"] for q in get_json(url, "localqueues")] == []


def test_admission_fair_sharing_takes_the_less_consuming_local_queue_first(
    stack: Stack, tmp_path: Path
) -> None:
    """With admissionScope and admissionFairSharing, team-a has consumed CPU and team-b none:
    when room frees, team-b's newer workload goes before team-a's older one; team-a's
    LocalQueue status shows its consumedResources."""
    url = stack.url
    objects = _afs_objects("1h", "5m", cpu=4)
    (tmp_path / "setup.yaml").write_text("\n---\n".join(json.dumps(o) for o in objects))
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    go = tmp_path / "go"
    submit_manifest(url, tmp_path, _held("a1", 4, "team-a", go))
    eventually(lambda: is_admitted(_workloads(url)["a1"]), timeout=60)
    workloads = _race(url, tmp_path, go, ("a2", 4, "team-a"), ("b1", 4, "team-b"))
    assert is_admitted(workloads["b1"]) and not is_admitted(workloads["a2"])
    queues = {q["metadata"]["name"]: q for q in get_json(url, "localqueues")}
    consumed = queues["team-a"]["status"]["fairSharing"]["admissionFairSharingStatus"]
    assert consumed["consumedResources"]["cpu"] not in ("", "0")
    described = berth("describe", "localqueue", "team-a", url=url).stdout
    assert "Admission Fair Sharing Status:" in described
    assert "Consumed Resources:" in described


def _afs_objects(half_life: str, sampling: str, cpu: int) -> list[dict[str, Any]]:
    """ClusterQueue `shared` (admission fair sharing, `cpu` CPUs), LocalQueues team-a/-b."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "berth"},
            "spec": {
                "admissionFairSharing": {
                    "usageHalfLifeTime": half_life,
                    "usageSamplingInterval": sampling,
                }
            },
        },
        {
            "apiVersion": V1,
            "kind": "ClusterQueue",
            "metadata": {"name": "shared"},
            "spec": {
                "namespaceSelector": {},
                "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [{"name": "cpu", "nominalQuota": cpu}],
                            }
                        ],
                    }
                ],
            },
        },
    ]
    for team in ("team-a", "team-b"):
        objects.append(
            {
                "apiVersion": V1,
                "kind": "LocalQueue",
                "metadata": {"name": team, "namespace": "default"},
                "spec": {"clusterQueue": "shared"},
            }
        )
    return objects


def _race(
    url: str, folder: Path, go: Path, *jobs: tuple[str, int, str]
) -> dict[str, dict[str, Any]]:
    """Submit ``jobs`` (name, CPUs, LocalQueue) in order; once they all wait in ClusterQueue
    `shared`, free the room (``go``); the workloads by name once one of them is admitted."""
    names = {name for name, _, _ in jobs}
    for name, cpu, queue in jobs:
        submit_manifest(url, folder, job_manifest(name, cpu=cpu, queue=queue))
    eventually(lambda: {p["name"] for p in get_json(url, "pending", "shared")} == names, timeout=60)
    go.touch()

    def one_admitted() -> dict[str, dict[str, Any]]:
        workloads = _workloads(url)
        assert any(is_admitted(workloads[name]) for name in names), f"none of {names} admitted"
        return workloads

    result: dict[str, dict[str, Any]] = eventually(one_admitted, timeout=60)
    return result


def _consumed_milli(url: str) -> dict[str, int]:
    """Each LocalQueue's consumedResources cpu, in milli-CPUs."""
    result = {}
    for queue in get_json(url, "localqueues"):
        fair = queue["status"]["fairSharing"]["admissionFairSharingStatus"]
        cpu = fair["consumedResources"].get("cpu", "0")
        result[queue["metadata"]["name"]] = (
            int(cpu[:-1]) if cpu.endswith("m") else round(float(cpu) * 1000)
        )
    return result


def test_admission_fair_sharing_history_survives_an_admission_restart(
    stack: Stack, tmp_path: Path
) -> None:
    """Phase 1: team-b runs one 1-CPU job throughout; team-a runs three 1-CPU jobs one after
    the other, inside that time. team-b has run more (its usage is at least team-a's at every
    moment), but team-a was admitted three times: with half-life 24h and sampling interval 1h
    each admission's entry penalty (28m CPU) outweighs hours of running, so team-a has
    consumed more. Admission is killed and restarted. Phase 2: a-probe (older) and b-probe
    wait for 2 CPUs; when team-b's job ends, b-probe goes first. A restart that lost the
    history (it kept only what ran) would take a-probe. The LocalQueues show the same
    consumedResources after the restart as before it, in `get -o json`, `-o wide`, describe."""
    url = stack.url
    (tmp_path / "setup.yaml").write_text(
        "\n---\n".join(json.dumps(o) for o in _afs_objects("24h", "1h", cpu=2))
    )
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    go = tmp_path / "go"
    submit_manifest(url, tmp_path, _held("b-long", 1, "team-b", go))
    eventually(lambda: is_admitted(_workloads(url)["b-long"]), timeout=60)
    for name in ("a1", "a2", "a3"):
        submit_manifest(url, tmp_path, job_manifest(name, cpu=1, queue="team-a", command=["true"]))

    def a_jobs_finished() -> bool:
        workloads = _workloads(url)
        return all(condition(workloads[n], "Finished") for n in ("a1", "a2", "a3"))

    eventually(a_jobs_finished, timeout=90)
    before = _consumed_milli(url)
    assert before["team-a"] > before["team-b"] > 0, before

    old = stack.pids["admission"]
    os.kill(old, signal.SIGKILL)
    eventually(lambda: not pid_alive(old), timeout=30)
    after = eventually(lambda: _consumed_milli(url), timeout=60)  # answered once replayed
    for team in ("team-a", "team-b"):  # decay over the seconds of the restart: < 1m CPU
        assert abs(after[team] - before[team]) <= 1, (before, after)

    workloads = _race(url, tmp_path, go, ("a-probe", 2, "team-a"), ("b-probe", 2, "team-b"))
    assert is_admitted(workloads["b-probe"]) and not is_admitted(workloads["a-probe"])

    wide = berth("get", "localqueues", "-o", "wide", url=url).stdout.splitlines()
    assert "CONSUMED RESOURCES" in wide[0] and "LAST UPDATE" in wide[0]
    rows = {line.split()[0]: line for line in wide[1:]}
    assert "cpu=" in rows["team-a"] and "cpu=" in rows["team-b"]
    described = berth("describe", "localqueue", "team-a", url=url).stdout
    assert "Consumed Resources:" in described and "Last Update:" in described


def test_cohorts_show_their_weighted_share(stack: Stack, tmp_path: Path) -> None:
    """Cohort objects: `team` (weight 2, no quota) under the root `org` (6 CPUs), holding
    ClusterQueue alpha (no quota). A 3-CPU job in alpha makes team borrow 3 of the 6 org
    could lend it: 500 per mille, over weight 2 = 250; org is a root: 0. `get cohorts -o
    wide`, `-o json` and `describe cohort` show Kueue's status.fairSharing.weightedShare."""
    url = stack.url
    objects: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "berth"},
            "spec": {"fairSharing": {"enable": True}},
        },
        {
            "apiVersion": V1,
            "kind": "Cohort",
            "metadata": {"name": "org"},
            "spec": _cpu_quota(6),
        },
        {
            "apiVersion": V1,
            "kind": "Cohort",
            "metadata": {"name": "team"},
            "spec": {"parentName": "org", "fairSharing": {"weight": "2"}},
        },
        {
            "apiVersion": V1,
            "kind": "ClusterQueue",
            "metadata": {"name": "alpha"},
            "spec": {"cohort": "team", "namespaceSelector": {}, **_cpu_quota(0)},
        },
        {
            "apiVersion": V1,
            "kind": "LocalQueue",
            "metadata": {"name": "alpha", "namespace": "default"},
            "spec": {"clusterQueue": "alpha"},
        },
    ]
    (tmp_path / "setup.yaml").write_text("\n---\n".join(json.dumps(o) for o in objects))
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    submit_manifest(url, tmp_path, job_manifest("a1", cpu=3, queue="alpha"))
    eventually(lambda: is_admitted(_workloads(url)["a1"]), timeout=60)

    shares = {
        c["metadata"]["name"]: c["status"]["fairSharing"]["weightedShare"]
        for c in get_json(url, "cohorts")
    }
    assert shares == {"org": 0, "team": 250}
    wide = berth("get", "cohorts", "-o", "wide", url=url).stdout.splitlines()
    assert wide[0].split()[:2] == ["NAME", "PARENT"] and "WEIGHTED SHARE" in wide[0]
    rows = {line.split()[0]: line.split() for line in wide[1:]}
    assert rows["team"][1] == "org" and rows["team"][-1] == "250" and rows["org"][-1] == "0"
    described = berth("describe", "cohort", "team", url=url).stdout
    assert "Weighted Share:       250" in described
    assert "Parent Name:" in described


def _cpu_quota(cpu: int) -> dict[str, Any]:
    """A spec's resourceGroups: `cpu` CPUs of flavor default."""
    resources = [{"name": "cpu", "nominalQuota": cpu}]
    return {
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": resources}]}
        ]
    }
