"""Readiness is reported only while waitForPodsReady is enabled, as Kueue sets PodsReady only
then (services/watcher/pods_ready_gate.py), end to end on `berth up`: a Job runs with the
setting off (no PodsReady fact, no PodsReady condition, no ready-time metric) for longer
than the setting's timeout; the setting is turned on while it runs: its readiness is sent at
once, and it is not evicted (its clock starts at the enabling); a Job admitted after that
is reported ready as it starts."""

from __future__ import annotations

import time
from pathlib import Path

from shared.events import EvictionRequested, WorkloadPodsReady, WorkloadStarted
from tests.conftest import Stack, berth
from tests.e2e import (
    condition,
    event_log,
    eventually,
    get_json,
    job_manifest,
    scrape,
    submit_manifest,
)
from tests.test_e2e_admission_checks import PODS_READY
from tests.test_e2e_metrics import samples, value

# The queues of PODS_READY, and its Configuration apart: applied later, with a long timeout.
QUEUES, _, _ = PODS_READY.partition("---\napiVersion: berth.dev/v1alpha1")
SETTING = PODS_READY  # timeout: 3s


def _ready_facts(url: str) -> dict[str, list[bool]]:
    """Each workload's PodsReady facts in the stream, in order."""
    facts: dict[str, list[bool]] = {}
    for event in event_log(url):
        if isinstance(event, WorkloadPodsReady):
            facts.setdefault(event.workload.name, []).append(event.ready)
    return facts


def _pods_ready_condition(url: str, name: str) -> tuple[str, str] | None:
    [workload] = [w for w in get_json(url, "workloads") if w["metadata"]["name"] == name]
    found = condition(workload, "PodsReady")
    return None if found is None else (found["status"], found["reason"])


def test_readiness_is_reported_from_when_wait_for_pods_ready_is_enabled(
    stack: Stack, tmp_path: Path
) -> None:
    url = stack.url
    queues, setting = tmp_path / "queues.yaml", tmp_path / "setting.yaml"
    queues.write_text(QUEUES)
    setting.write_text(SETTING)
    berth("apply", "-f", str(queues), url=url)
    submit_manifest(url, tmp_path, job_manifest("early", cpu=1, command=["sleep", "600"]))

    def started(name: str) -> bool:
        return any(
            isinstance(e, WorkloadStarted) and e.workload.name == name for e in event_log(url)
        )

    eventually(lambda: started("early"))
    # A run with no probe is ready as it starts: with the setting on, its fact would be here.
    # Longer than the timeout (3 s): timed from its admission, it would be evicted at once.
    time.sleep(3.5)
    assert _ready_facts(url) == {}, "no readiness reported while waitForPodsReady is off"
    assert _pods_ready_condition(url, "early") is None, "no PodsReady condition, as Kueue"
    admission = samples(scrape(stack, "admission"))
    ready_count = "berth_admitted_until_ready_wait_time_seconds_count"
    assert value(admission, ready_count, cluster_queue="cluster-queue") in (None, 0)

    berth("apply", "-f", str(setting), url=url)
    eventually(lambda: _ready_facts(url).get("early") == [True])
    eventually(lambda: _pods_ready_condition(url, "early") == ("True", "Started"))

    submit_manifest(url, tmp_path, job_manifest("late", cpu=1, command=["sleep", "600"]))
    eventually(lambda: _ready_facts(url).get("late") == [True])
    assert _ready_facts(url) == {"early": [True], "late": [True]}
    evictions = [e for e in event_log(url) if isinstance(e, EvictionRequested)]
    assert evictions == [], "nothing timed out"
