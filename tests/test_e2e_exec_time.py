"""maximumExecutionTimeSeconds end to end on `berth up`: a Job past its limit is evicted and
deactivated (Kueue's reason DeactivatedDueToMaximumExecutionTimeExceeded) and not admitted
again until it is resumed (tests/test_e2e_deactivation.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import condition, eventually, get_json, is_admitted, job_manifest, submit_manifest


def test_a_job_past_its_limit_is_evicted_and_deactivated(stack: Stack, tmp_path: Path) -> None:
    """2 s of `sleep 600`: evicted with Kueue's reason, and still not admitted later."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    manifest = job_manifest("limited", cpu=1, command=["sleep", "600"])
    manifest["metadata"]["annotations"] = {"kueue.x-k8s.io/max-exec-time-seconds": "2"}
    submit_manifest(url, tmp_path, manifest)

    def workload() -> dict[str, Any]:
        return next(w for w in get_json(url, "workloads") if w["metadata"]["name"] == "limited")

    eventually(lambda: is_admitted(workload()), timeout=60)

    def evicted() -> dict[str, Any]:
        found = condition(workload(), "Evicted")
        assert found is not None and found["status"] == "True", found
        assert found["reason"] == "DeactivatedDueToMaximumExecutionTimeExceeded", found
        return found

    eventually(evicted, timeout=60)

    def inactive() -> bool:  # out of its queue for good (1 CPU of 2 is free for it)
        reserved = condition(workload(), "QuotaReserved")
        assert reserved is not None and reserved["reason"] == "Inactive", reserved
        return True

    eventually(inactive, timeout=60)
    assert not is_admitted(workload())
    assert workload()["spec"]["active"] is False
