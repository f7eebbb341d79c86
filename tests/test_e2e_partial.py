"""Partial admission end to end on `berth up`: a Job with Kueue's job-min-parallelism runs with
the pods that fit; one whose minimum exceeds the quota waits, saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import condition, eventually, get_json, is_admitted, job_manifest, submit_manifest

MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"


def _job(name: str, *, pods: int, minimum: int, cpu: str) -> dict[str, Any]:
    manifest = job_manifest(name, cpu=cpu, command=["sleep", "600"])
    manifest["metadata"]["annotations"] = {MIN_PARALLELISM: str(minimum)}
    manifest["spec"].update(parallelism=pods, completions=pods)
    return manifest


def test_min_parallelism_admits_what_fits_and_a_too_large_minimum_waits(
    stack: Stack, tmp_path: Path
) -> None:
    """2 CPUs: 6 pods of 500m with a minimum of 2 run as 4; 8 pods of 1 CPU with a minimum
    of 6 never fit and stay pending with the quota named."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    submit_manifest(url, tmp_path, _job("wide", pods=6, minimum=2, cpu="500m"))
    submit_manifest(url, tmp_path, _job("too-wide", pods=8, minimum=6, cpu="1"))

    def settled() -> dict[str, dict[str, Any]]:
        workloads = {w["metadata"]["name"]: w for w in get_json(url, "workloads")}
        assert is_admitted(workloads["wide"])
        reserved = condition(workloads["too-wide"], "QuotaReserved")
        assert reserved is not None and reserved["status"] == "False"
        assert "request > maximum capacity (8 > 2)" in reserved["message"], reserved
        assert "at its minimum (main: 6)" in reserved["message"], reserved
        assert reserved["message"].endswith("(6 > 2)"), reserved
        return workloads

    workloads = eventually(settled, timeout=60)
    assignment = workloads["wide"]["status"]["admission"]["podSetAssignments"][0]
    assert assignment["count"] == 4
    assert assignment["resourceUsage"]["cpu"] == "2"
    assert not is_admitted(workloads["too-wide"])
