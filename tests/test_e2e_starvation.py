"""No starvation: a preempted managed job under an endless stream of higher-priority work.

One 2-CPU low-priority managed job runs in a 2-CPU ClusterQueue; a stream of 1-CPU
high-priority jobs starts, preempts it and keeps the queue full. With ageing (a steep rate and
a reservation after 2 s) the low job runs again within the bound ``reserveAfter + R`` (R: the
longest runtime of what holds the quota, 1.5 s here) and finishes; with ageing off it waits
for as long as the stream lasts. Either way no job is preempted twice by the same preemptor.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bench.ageing import SETUP as AGEING_SCENARIO
from berth_cli.writing import submit_workloads
from shared.bus import JOBS_BUCKET, Bus
from shared.events import EvictionRequested, WorkloadAdmitted
from shared.jobs import decode_job, job_key
from tests.conftest import Stack, berth
from tests.e2e import event_log, job_manifest

SETUP = AGEING_SCENARIO.replace("CPUS", "2")  # one ClusterQueue, low/high classes, a policy
AGEING_ON = "{priorityPerMinute: 60000, reserveAfter: 2s}"  # +1000 a second; reserve at 2 s
AGEING_OFF = "{priorityPerMinute: 0, reserveAfter: null}"


async def _job_status(bus: Bus, job_id: int) -> tuple[str, int]:
    entry = await (await bus.kv(JOBS_BUCKET)).get(job_key(job_id))
    assert entry.value is not None
    record = decode_job(entry.value)
    return record.status.value, record.recoveries


async def _stream(url: str, seconds: float, job_id: int) -> list[tuple[float, str]]:
    """Submit a 1-CPU high-priority job every 0.5 s; sample the managed job's status."""
    bus = await Bus.connect(url, source="test")
    samples: list[tuple[float, str]] = []
    started = time.monotonic()
    index = 0
    try:
        while time.monotonic() - started < seconds:
            document = job_manifest(
                f"high-{index}", cpu=1, simulated_runtime="1500ms", priority_class="high"
            )
            await submit_workloads(url, [document], "stream", namespace="default")
            index += 1
            status, _ = await _job_status(bus, job_id)
            samples.append((time.monotonic() - started, status))
            await asyncio.sleep(0.5)
    finally:
        await bus.close()
    return samples


def _run(stack: Stack, tmp_path: Path, ageing: str) -> tuple[int, list[tuple[float, str]]]:
    url = stack.url
    (tmp_path / "setup.yaml").write_text(SETUP.replace("AGEING", ageing))
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    import yaml

    (tmp_path / "low.yaml").write_text(
        yaml.safe_dump(job_manifest("low", cpu=2, simulated_runtime="3s", priority_class="low"))
    )
    launched = berth("jobs", "launch", str(tmp_path / "low.yaml"), url=url).stdout.split()
    job_id = int(launched[3])

    async def wait_running() -> None:
        bus = await Bus.connect(url, source="test")
        try:
            for _ in range(100):
                if (await _job_status(bus, job_id))[0] == "RUNNING":
                    return
                await asyncio.sleep(0.1)
            raise AssertionError("the low job never ran")
        finally:
            await bus.close()

    asyncio.run(wait_running())
    return job_id, asyncio.run(_stream(url, 12.0, job_id))


def _preemptor_pairs_unique(url: str) -> list[EvictionRequested]:
    evictions = [e for e in event_log(url) if isinstance(e, EvictionRequested)]
    pairs = [(e.workload.uid, e.preemptor.uid if e.preemptor else "") for e in evictions]
    assert len(pairs) == len(set(pairs)), "a job was preempted twice by the same preemptor"
    return evictions


@pytest.mark.timeout(180)
def test_ageing_brings_the_preempted_job_back_within_the_bound(
    stack: Stack, tmp_path: Path
) -> None:
    """With ageing, the low job runs again within reserveAfter + R and then finishes."""
    _job_id, samples = _run(stack, tmp_path, AGEING_ON)
    recovering = [t for t, status in samples if status == "RECOVERING"]
    back = [
        t for t, status in samples if recovering and t > recovering[0] and status != "RECOVERING"
    ]
    assert recovering, samples
    assert back, f"never came back: {samples}"
    waited = back[0] - recovering[0]
    assert waited <= 2.0 + 1.5 + 2.5, f"waited {waited:.1f}s, bound 3.5s (+ sampling): {samples}"
    assert any(status == "SUCCEEDED" for _, status in samples), samples
    evictions = _preemptor_pairs_unique(stack.url)
    assert [e.workload.name for e in evictions].count("low-1") == 1  # boosted: not a victim again
    admitted = [
        e
        for e in event_log(stack.url)
        if isinstance(e, WorkloadAdmitted) and e.workload.name == "low-1"
    ]
    assert admitted[-1].priority > 1000  # readmitted above the stream's priority


@pytest.mark.timeout(180)
def test_without_ageing_the_stream_starves_the_job(stack: Stack, tmp_path: Path) -> None:
    """With ageing off, the preempted job waits as long as high-priority work keeps coming."""
    _job_id, samples = _run(stack, tmp_path, AGEING_OFF)
    first = next(t for t, status in samples if status == "RECOVERING")
    assert all(status == "RECOVERING" for t, status in samples if t >= first), samples
    assert samples[-1][0] - first >= 9.0
    _preemptor_pairs_unique(stack.url)
