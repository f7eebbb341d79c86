"""No starvation: a preempted managed job under an endless stream of higher-priority work.

One 2-CPU low-priority managed job runs in a 2-CPU ClusterQueue; a stream of 1-CPU
high-priority jobs starts, preempts it and keeps the queue full. With ageing (a steep rate,
a reservation after 2 s, runs it brings back protected for 3 s, reservations may hold the
whole quota) the job shows a bound (``status.berth.runsBy``) while it waits, runs again by
that bound, is never preempted inside its protection, and finishes; with ageing off it
shows no bound and waits for as long as the stream lasts. Either way no job is preempted
twice by the same preemptor.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from bench.ageing import SETUP as AGEING_SCENARIO
from berth_cli.client import query_all
from berth_cli.writing import submit_workloads
from shared.bus import JOBS_BUCKET, Bus
from shared.events import EvictionRequested, WorkloadAdmitted
from shared.jobs import decode_job, job_key
from tests.conftest import Stack, berth, bus_auth
from tests.e2e import event_log, job_manifest

SETUP = AGEING_SCENARIO.replace("CPUS", "2")  # one ClusterQueue, low/high classes, a policy
PROTECT_FOR = 3.0
AGEING_ON = (  # +1000 a second; reserve at 2 s; the whole quota may be reserved
    "{priorityPerMinute: 60000, reserveAfter: 2s, protectFor: 3s, maxReservedShare: 1}"
)
AGEING_OFF = "{priorityPerMinute: 0, reserveAfter: null}"


class Sample:
    def __init__(self, at: float, status: str, runs_by: str | None, reason: str) -> None:
        self.at, self.status, self.runs_by, self.reason = at, status, runs_by, reason

    def __repr__(self) -> str:
        return f"{self.at:.1f}s {self.status} {self.runs_by or '-'} ({self.reason})"


async def _job_status(bus: Bus, job_id: int) -> tuple[str, str]:
    """(status, its current workload's name)."""
    entry = await (await bus.kv(JOBS_BUCKET)).get(job_key(job_id))
    assert entry.value is not None
    record = decode_job(entry.value)
    return record.status.value, record.attempts[-1].name


async def _bound(bus: Bus, name: str) -> tuple[str | None, str]:
    """What `berth get workloads -o json` shows: status.berth.runsBy and its reason."""
    [item] = await query_all(bus, "workloads", names=[f"default/{name}"])
    shown = item["status"]["berth"]
    return shown.get("runsBy"), shown.get("runsByReason", "")


async def _stream(url: str, seconds: float, job_id: int) -> list[Sample]:
    """Submit a 1-CPU high-priority job every 0.5 s; sample the managed job and its bound.
    The stream stops after ``seconds``, or once the job succeeded (it can no longer be
    preempted or wait: nothing later could change what the tests assert)."""
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    samples: list[Sample] = []
    started = time.monotonic()
    index = 0
    try:
        while time.monotonic() - started < seconds and not (
            samples and samples[-1].status == "SUCCEEDED"
        ):
            document = job_manifest(
                f"high-{index}", cpu=1, simulated_runtime="1500ms", priority_class="high"
            )
            await submit_workloads(url, [document], "stream", namespace="default")
            index += 1
            status, name = await _job_status(bus, job_id)
            runs_by, reason = await _bound(bus, name)
            samples.append(Sample(time.monotonic() - started, status, runs_by, reason))
            await asyncio.sleep(0.5)
    finally:
        await bus.close()
    return samples


def _run(stack: Stack, tmp_path: Path, ageing: str, seconds: float) -> list[Sample]:
    url = stack.url
    (tmp_path / "setup.yaml").write_text(SETUP.replace("AGEING", ageing))
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    (tmp_path / "low.yaml").write_text(
        yaml.safe_dump(job_manifest("low", cpu=2, simulated_runtime="3s", priority_class="low"))
    )
    launched = berth("jobs", "launch", str(tmp_path / "low.yaml"), url=url).stdout.split()
    job_id = int(launched[3])

    async def wait_running() -> None:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            for _ in range(100):
                if (await _job_status(bus, job_id))[0] == "RUNNING":
                    return
                await asyncio.sleep(0.1)
            raise AssertionError("the low job never ran")
        finally:
            await bus.close()

    asyncio.run(wait_running())
    return asyncio.run(_stream(url, seconds, job_id))


def _preemptor_pairs_unique(url: str) -> list[EvictionRequested]:
    evictions = [e for e in event_log(url) if isinstance(e, EvictionRequested)]
    pairs = [(e.workload.uid, e.preemptor.uid if e.preemptor else "") for e in evictions]
    assert len(pairs) == len(set(pairs)), "a job was preempted twice by the same preemptor"
    return evictions


@pytest.mark.timeout(120)
def test_ageing_brings_the_preempted_job_back_by_its_shown_bound(
    stack: Stack, tmp_path: Path
) -> None:
    """With ageing, the waiting job shows a bound, runs again by it, is not preempted inside
    its protection, and finishes."""
    samples = _run(stack, tmp_path, AGEING_ON, 10.0)
    shown = [s.runs_by for s in samples if s.status == "RECOVERING" and s.runs_by]
    assert shown, f"no bound shown while it waited: {samples}"
    bound = min(datetime.fromisoformat(s.replace("Z", "+00:00")) for s in shown)
    assert any(s.status == "SUCCEEDED" for s in samples), samples
    events = event_log(stack.url)
    mine = [e for e in events if e.workload.name == "low-1"]
    admissions = [e for e in mine if isinstance(e, WorkloadAdmitted)]
    evictions = [e for e in mine if isinstance(e, EvictionRequested)]
    assert len(admissions) >= 2 and evictions, "it was never preempted and readmitted"
    readmitted = admissions[1].time
    assert readmitted <= bound, f"readmitted at {readmitted}, shown bound {bound}: {samples}"
    for admission in admissions[1:]:  # runs ageing brought back are protected
        for eviction in evictions:
            ran = (eviction.time - admission.time).total_seconds()
            assert not 0 <= ran < PROTECT_FOR, f"preempted {ran:.1f}s after coming back"
    assert admissions[-1].priority > 1000  # readmitted above the stream's priority
    _preemptor_pairs_unique(stack.url)


@pytest.mark.timeout(120)
def test_without_ageing_the_stream_starves_the_job(stack: Stack, tmp_path: Path) -> None:
    """With ageing off, the preempted job shows no bound and waits as long as high-priority
    work keeps coming."""
    samples = _run(stack, tmp_path, AGEING_OFF, 6.0)
    first = next(s.at for s in samples if s.status == "RECOVERING")
    waiting = [s for s in samples if s.at >= first]
    assert all(s.status == "RECOVERING" for s in waiting), samples
    assert all(s.runs_by is None for s in waiting), samples
    # Its first sample may come before recovery announced the preemption (then it "does not
    # age" yet); from then on the reason is the policy's.
    settled = [s for s in waiting if s.at >= waiting[0].at + 1.0]
    assert settled and all("reserveAfter: null" in s.reason for s in settled), samples
    assert samples[-1].at - first >= 4.0  # twice what ageing on needs to reserve (2 s)
    _preemptor_pairs_unique(stack.url)


async def _plain_under_stream(url: str, seconds: float) -> list[Sample]:
    """The stream of 1-CPU high-priority jobs; after two of them, a plain 2-CPU low-priority
    Job (not a managed job, never preempted); its bound sampled every 0.5 s. The stream
    stops after ``seconds``, or once the plain Job finished (then it neither waits nor runs)."""
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    samples: list[Sample] = []
    started = time.monotonic()
    finished = False
    try:
        for index in range(int(seconds * 2)):
            if finished:
                break
            document = job_manifest(
                f"high-{index}", cpu=1, simulated_runtime="1500ms", priority_class="high"
            )
            await submit_workloads(url, [document], "stream", namespace="default")
            if index == 2:
                plain = job_manifest("plain", cpu=2, simulated_runtime="1s", priority_class="low")
                await submit_workloads(url, [plain], "plain", namespace="default")
            if index >= 2:
                found = await query_all(bus, "workloads", names=["default/plain"])
                if found:
                    conditions = found[0]["status"].get("conditions", [])
                    finished = any(c["type"] == "Finished" for c in conditions)
                    shown = found[0]["status"].get("berth", {})
                    state = "pending" if "runsByReason" in shown else "other"
                    samples.append(Sample(time.monotonic() - started, state,
                                          shown.get("runsBy"), shown.get("runsByReason", "")))  # fmt: skip
            await asyncio.sleep(0.5)
    finally:
        await bus.close()
    return samples


@pytest.mark.timeout(120)
def test_a_plain_workload_runs_by_its_shown_bound(stack: Stack, tmp_path: Path) -> None:
    """A plain low-priority Job, never preempted, waiting behind an endless stream of
    higher-priority work: it shows a bound while it waits (every pending workload ages once
    a wait lasts reserveAfter; none only while those waiting longer fill the share with it),
    `berth get workloads -o wide` shows RUNS BY, and it is admitted by the earliest bound it
    showed."""
    url = stack.url
    (tmp_path / "setup.yaml").write_text(SETUP.replace("AGEING", AGEING_ON))
    berth("apply", "-f", str(tmp_path / "setup.yaml"), url=url)
    samples = asyncio.run(_plain_under_stream(url, 10.0))
    waiting = [s for s in samples if s.status == "pending"]
    shown = [s for s in waiting if s.runs_by]
    assert shown, f"no bound shown while it waited: {samples}"
    # Without one, only while those ahead of it (waiting longer) do not fit the share with it.
    assert all("started ageing first" in s.reason for s in waiting if not s.runs_by), samples
    bound = min(datetime.fromisoformat(str(s.runs_by).replace("Z", "+00:00")) for s in shown)
    admissions = [
        e for e in event_log(url) if isinstance(e, WorkloadAdmitted) and e.workload.name == "plain"
    ]
    assert admissions, f"the plain workload was never admitted: {samples}"
    assert admissions[0].time <= bound, f"admitted at {admissions[0].time}, bound {bound}"
    assert any(s.status == "other" for s in samples), "still pending when the stream ended"
    wide = berth("get", "workloads", "-o", "wide", url=url).stdout
    assert "RUNS BY" in wide.splitlines()[0], wide
    _preemptor_pairs_unique(url)
