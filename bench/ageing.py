"""Benchmark: preempted managed jobs' waits, with and without ageing, on the live stack.

For each mode (ageing ON, then OFF) it starts a fresh `berth up` (temp data dir, NATS on a
free port), applies one ClusterQueue of ``--cpus`` CPUs (``withinClusterQueue:
LowerPriority``) with a ClusterQueuePolicy, launches ``--managed`` low-priority managed jobs
(`berth jobs launch` of a batch/v1 Job with a ``berth.dev/simulated-runtime``), then streams
high-priority plain jobs (Poisson arrivals, seeded) for ``--stream-seconds`` and drains until
every managed job has ended (or ``--drain-timeout``). From the event log it computes, per
managed job, its preemptions and each wait (WorkloadEvicted -> next WorkloadAdmitted; a wait
still open at the end of the run is *censored* and counted up to the end), the preemptions
per admission over all workloads, and how often a (victim, preemptor) pair repeated.

The stated bound (docs/ageing.md) is ``reserveAfter + R + d`` counted from a job's FIRST
preemption, R the longest remaining runtime of what holds the quota; the table compares the
longest wait with ``reserveAfter + R``, R = the longest runtime in the stream. Managed jobs
also hold quota (``--managed-runtime``), so the table shows that variant of R too. Run:

    .venv/bin/python bench/ageing.py            # both modes, ~2-3 min on 2 cores
    .venv/bin/python bench/ageing.py --quick    # ~30 s smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import math
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
import yaml
from rich.console import Console
from rich.table import Table

from bench.eventlog import signed_in_as
from berth_cli.launcher import start_stack
from berth_cli.main import cli
from berth_cli.writing import submit_workloads
from shared.auth import ClientAuth
from shared.bus import JOBS_BUCKET, Bus
from shared.eventlog import read_events
from shared.events import (
    AnyEvent,
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadSubmitted,
)
from shared.jobs import TERMINAL, ManagedJob, decode_job, job_key

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "default"
THRASH_SECONDS = 1.0  # a readmission preempted again this soon made no real progress

SETUP = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default-flavor, resources: [{name: cpu, nominalQuota: CPUS}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: user-queue, namespace: default}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: berth.dev/v1alpha1
kind: ClusterQueuePolicy
metadata: {name: ageing}
spec:
  clusterQueues: [cq]
  ageing: AGEING
"""
AGEING_OFF = "{priorityPerMinute: 0, reserveAfter: null}"

console = Console(highlight=False)


# --- the CLI ------------------------------------------------------------------------------


def berth(*args: str, url: str) -> str:
    """Run the real `berth` CLI (its click command, in this process: no interpreter start-up
    per call, which costs seconds on a small machine); return what it printed."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            cli.main(["--nats-url", url, *args], prog_name="berth", standalone_mode=False)
    except click.ClickException as error:
        raise RuntimeError(f"berth {' '.join(args)} failed: {error.format_message()}") from error
    return out.getvalue()


# --- the scenario ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    cpus: int
    managed: int
    managed_cpus: tuple[int, int]
    managed_runtime: tuple[float, float]
    stream_seconds: float
    rate: float
    stream_cpus: tuple[int, int]
    stream_runtime: tuple[float, float]
    priority_per_minute: int
    reserve_after: float
    drain_timeout: float
    seed: int

    @property
    def ageing_on(self) -> str:
        return (
            f"{{priorityPerMinute: {self.priority_per_minute},"
            f" reserveAfter: {_duration(self.reserve_after)}}}"
        )

    @property
    def offered_load(self) -> float:
        """CPU-seconds per second the stream asks for, as a fraction of the quota."""
        cpu = sum(self.stream_cpus) / 2
        runtime = sum(self.stream_runtime) / 2
        return self.rate * cpu * runtime / self.cpus


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def job(name: str, *, cpu: int, runtime: float, priority_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {
                "kueue.x-k8s.io/queue-name": "user-queue",
                "kueue.x-k8s.io/priority-class": priority_class,
            },
            "annotations": {"berth.dev/simulated-runtime": _duration(runtime)},
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]
                }
            }
        },
    }


def launch_managed(url: str, scenario: Scenario, rng: random.Random, work: Path) -> list[int]:
    """`berth jobs launch` each managed job; return their ids."""
    ids = []
    for index in range(scenario.managed):
        cpu = rng.randint(*scenario.managed_cpus)
        runtime = rng.uniform(*scenario.managed_runtime)
        path = work / f"managed-{index}.yaml"
        path.write_text(
            yaml.safe_dump(job(f"managed-{index}", cpu=cpu, runtime=runtime, priority_class="low"))
        )
        out = berth("jobs", "launch", str(path), url=url)
        ids.append(int(out.split()[3]))  # "Managed job ID: 3  (managed-2, 1x[...])"
    return ids


async def read_jobs(bus: Bus, ids: list[int]) -> dict[int, ManagedJob]:
    kv = await bus.kv(JOBS_BUCKET)
    records = {}
    for job_id in ids:
        entry = await kv.get(job_key(job_id))
        if entry.value is not None:
            records[job_id] = decode_job(entry.value)
    return records


async def wait_some_running(url: str, ids: list[int], auth: ClientAuth, within: float = 30) -> None:
    bus = await Bus.connect(url, source="bench", auth=auth)
    try:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            records = await read_jobs(bus, ids)
            if any(r.status.value == "RUNNING" for r in records.values()):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError("no managed job ever ran")
    finally:
        await bus.close()


async def stream(url: str, scenario: Scenario, rng: random.Random) -> tuple[int, float]:
    """Submit high-priority jobs at Poisson arrival times; return (count, longest runtime)."""
    started = time.monotonic()
    next_at = rng.expovariate(scenario.rate)
    index = 0
    longest = 0.0
    while next_at < scenario.stream_seconds:
        delay = started + next_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        due = []  # everything whose arrival time has passed, in one submission
        elapsed = time.monotonic() - started
        while next_at <= elapsed and next_at < scenario.stream_seconds:
            runtime = rng.uniform(*scenario.stream_runtime)
            longest = max(longest, runtime)
            due.append(
                job(
                    f"high-{index}",
                    cpu=rng.randint(*scenario.stream_cpus),
                    runtime=runtime,
                    priority_class="high",
                )
            )
            index += 1
            next_at += rng.expovariate(scenario.rate)
        if due:
            await submit_workloads(url, due, "bench", namespace=NAMESPACE)
    return index, longest


async def drain(url: str, ids: list[int], auth: ClientAuth, within: float) -> dict[int, ManagedJob]:
    """Wait until every managed job has ended (or ``within`` seconds); return the records."""
    bus = await Bus.connect(url, source="bench", auth=auth)
    try:
        deadline = time.monotonic() + within
        while True:
            records = await read_jobs(bus, ids)
            ended = all(r.status in TERMINAL for r in records.values()) and len(records) == len(ids)
            if ended or time.monotonic() > deadline:
                return records
            await asyncio.sleep(0.25)
    finally:
        await bus.close()


async def event_log(url: str) -> list[AnyEvent]:
    """Every event in the stream, in order."""
    return await read_events(url)


# --- the numbers ----------------------------------------------------------------------------


@dataclass
class JobStats:
    job_id: int
    name: str
    status: str
    preemptions: int = 0
    admissions: int = 0
    waits: list[float] = field(default_factory=list)
    censored: int = 0
    thrashed: int = 0  # admissions whose eviction was requested within THRASH_SECONDS


@dataclass
class Result:
    mode: str
    bound_label: str
    reserve_after: float | None
    stream_jobs: int
    stream_longest: float
    managed_longest: float
    seconds: float
    drained: bool
    analysis: Analysis

    @property
    def jobs(self) -> list[JobStats]:
        return self.analysis.jobs

    @property
    def waits(self) -> list[float]:
        return sorted(w for j in self.jobs for w in j.waits)


@dataclass
class Analysis:
    jobs: list[JobStats]
    evictions: int  # EvictionRequested, all workloads
    admissions: int  # WorkloadAdmitted, all workloads
    repeated_pairs: int  # (victim, preemptor) pairs seen more than once, extra occurrences
    worst_pair: int  # the most times one pair occurred
    stream_waits: list[float]  # plain jobs: submitted -> first admitted (censored at the end)


def analyse(events: list[AnyEvent], records: dict[int, ManagedJob], end: datetime) -> Analysis:
    owner: dict[str, int] = {}  # workload uid -> managed job id (every attempt)
    stats: dict[int, JobStats] = {}
    for job_id, record in records.items():
        stats[job_id] = JobStats(job_id, record.name, record.status.value)
        for attempt in record.attempts:
            owner[attempt.uid] = job_id
    evicted_at: dict[int, datetime] = {}  # job id -> when its open wait began
    admitted_at: dict[tuple[str, int], datetime] = {}  # (uid, generation) -> admitted
    submitted_at: dict[str, datetime] = {}  # plain workload uid -> submitted, until admitted
    stream_waits: list[float] = []
    evictions = admissions = 0
    pairs: Counter[tuple[str, str]] = Counter()
    for event in events:
        managed = owner.get(event.workload.uid)
        if isinstance(event, EvictionRequested):
            evictions += 1
            if event.preemptor is not None:
                pairs[(event.workload.uid, event.preemptor.uid)] += 1
            if managed is not None and event.reason == "Preempted":
                stats[managed].preemptions += 1
                admitted = admitted_at.get((event.workload.uid, event.generation))
                if admitted and (event.time - admitted).total_seconds() < THRASH_SECONDS:
                    stats[managed].thrashed += 1
        elif isinstance(event, WorkloadAdmitted):
            admissions += 1
            if managed is not None:
                stats[managed].admissions += 1
                admitted_at[(event.workload.uid, event.generation)] = event.time
                began = evicted_at.pop(managed, None)
                if began is not None:
                    stats[managed].waits.append((event.time - began).total_seconds())
            elif event.workload.uid in submitted_at:
                began = submitted_at.pop(event.workload.uid)
                stream_waits.append((event.time - began).total_seconds())
        elif isinstance(event, WorkloadEvicted) and managed is not None:
            evicted_at.setdefault(managed, event.time)
        elif isinstance(event, WorkloadSubmitted) and event.workload.name.startswith("high-"):
            submitted_at.setdefault(event.workload.uid, event.time)
    for job_id, began in evicted_at.items():  # never readmitted: censored at the end
        stats[job_id].waits.append((end - began).total_seconds())
        stats[job_id].censored += 1
    stream_waits.extend((end - began).total_seconds() for began in submitted_at.values())
    return Analysis(
        jobs=sorted(stats.values(), key=lambda s: s.job_id),
        evictions=evictions,
        admissions=admissions,
        repeated_pairs=sum(n - 1 for n in pairs.values()),
        worst_pair=max(pairs.values(), default=0),
        stream_waits=sorted(stream_waits),
    )


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    if not values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(values)))
    return values[rank - 1]


# --- one mode -------------------------------------------------------------------------------


def run_mode(mode: str, ageing: str, scenario: Scenario, reserve_after: float | None) -> Result:
    rng = random.Random(scenario.seed)  # the same jobs and arrivals in both modes
    began = time.monotonic()

    def note(text: str) -> None:
        console.print(f"[dim]{time.monotonic() - began:6.1f}s  ageing {mode}: {text}[/]")

    with tempfile.TemporaryDirectory(prefix=f"berth-bench-{mode.lower()}-") as tmp:
        work = Path(tmp)
        stack = start_stack(work / "berth")
        # The bench reads as admin; its `berth` commands (in this process) run as the CLI.
        admin = ClientAuth(seed=stack.credentials("admin"))
        try:
            with signed_in_as(stack.cli_credentials):
                url = stack.url
                note(f"stack ready at {url}")
                (work / "setup.yaml").write_text(
                    SETUP.replace("CPUS", str(scenario.cpus)).replace("AGEING", ageing)
                )
                berth("apply", "-f", str(work / "setup.yaml"), url=url)
                started = time.monotonic()
                ids = launch_managed(url, scenario, rng, work)
                asyncio.run(wait_some_running(url, ids, admin))
                note(f"{len(ids)} managed jobs launched; streaming")
                count, longest = asyncio.run(stream(url, scenario, rng))
                note(f"{count} stream jobs submitted; draining")
                records = asyncio.run(drain(url, ids, admin, scenario.drain_timeout))
                end = datetime.now(UTC)
                seconds = time.monotonic() - started
                drained = all(r.status in TERMINAL for r in records.values())
                events = asyncio.run(event_log(url))
                note(f"drained; {len(events)} events read; stopping the stack")
        finally:
            stack.stop()
    note("stopped")
    return Result(
        mode=mode,
        bound_label=ageing,
        reserve_after=reserve_after,
        stream_jobs=count,
        stream_longest=longest,
        managed_longest=scenario.managed_runtime[1],
        seconds=seconds,
        drained=drained,
        analysis=analyse(events, records, end),
    )


def _s(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}s"


def _spread(values: list[float]) -> str:
    p50, p90 = percentile(values, 50), percentile(values, 90)
    return f"{_s(p50)} / {_s(p90)} / {_s(max(values) if values else math.nan)}"


def print_result(result: Result, *, per_job: bool) -> None:
    found = result.analysis
    waits = result.waits
    longest = max(waits) if waits else math.nan
    censored = sum(j.censored for j in result.jobs)
    preempted = sum(1 for j in result.jobs if j.preemptions)
    succeeded = sum(1 for j in result.jobs if j.status == "SUCCEEDED")
    preemptions = sum(j.preemptions for j in result.jobs)
    table = Table(title=f"ageing {result.mode}: {result.bound_label}", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    ran = f"{result.seconds:.1f}s" + ("" if result.drained else " [red](drain timed out)[/]")
    table.add_row("run (launch -> every managed job ended)", ran)
    table.add_row(
        "managed jobs (preempted / succeeded)", f"{len(result.jobs)} ({preempted} / {succeeded})"
    )
    table.add_row("preemptions of managed jobs", str(preemptions))
    table.add_row(
        "preemptions per admission, all workloads",
        f"{found.evictions} / {found.admissions} = "
        f"{found.evictions / max(1, found.admissions):.3f}",
    )
    table.add_row("managed waits, evicted -> readmitted", str(len(waits)))
    table.add_row("  p50 / p90 / max", _spread(waits))
    table.add_row("  censored (never readmitted)", str(censored))
    thrashed = sum(j.thrashed for j in result.jobs)
    table.add_row(f"  preempted again < {THRASH_SECONDS:g}s after admission", str(thrashed))
    if result.reserve_after is None:
        table.add_row("max wait vs reserveAfter + R", "no bound (reservations off)")
    else:
        for label, r in (
            ("R = longest stream runtime", result.stream_longest),
            ("R incl. managed runtimes", max(result.stream_longest, result.managed_longest)),
        ):
            bound = result.reserve_after + r
            verdict = "[green]within[/]" if longest <= bound else "[red]EXCEEDED[/]"
            over = sum(1 for w in waits if w > bound)
            table.add_row(
                f"max wait vs {result.reserve_after:g}s + R ({label})",
                f"{_s(longest)} vs {bound:.1f}s: {verdict}, {over} over",
            )
    colour = "green" if found.repeated_pairs == 0 else "red"
    table.add_row(
        "repeated (victim, preemptor) pairs (expected 0)",
        f"[{colour}]{found.repeated_pairs}[/] (worst pair x{found.worst_pair})",
    )
    table.add_row(
        f"stream jobs ({result.stream_jobs}), submitted -> admitted", _spread(found.stream_waits)
    )
    console.print(table)
    if per_job:
        detail = Table(title=f"ageing {result.mode}: per managed job", title_justify="left")
        columns = (
            "job",
            "name",
            "status",
            "admissions",
            "preemptions",
            f"< {THRASH_SECONDS:g}s after admission",
            "wait p50 / p90 / max",
            "censored",
        )
        for column in columns:
            detail.add_column(column, justify="left" if column in ("name", "status") else "right")
        for j in result.jobs:
            detail.add_row(
                str(j.job_id),
                j.name,
                j.status,
                str(j.admissions),
                str(j.preemptions),
                str(j.thrashed),
                _spread(sorted(j.waits)),
                str(j.censored),
            )
        console.print(detail)


# --- command line ---------------------------------------------------------------------------


def _pair(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> tuple[Any, Any]:
        low, _, high = text.partition("..")
        return kind(low), kind(high or low)

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a ~30 s smoke run (small sizes)")
    parser.add_argument("--cpus", type=int, help="ClusterQueue quota (default 8; quick 4)")
    parser.add_argument("--managed", type=int, help="managed jobs (default 8; quick 3)")
    parser.add_argument("--managed-cpus", type=_pair(int), help="LOW..HIGH (default 1..4)")
    parser.add_argument(
        "--managed-runtime", type=_pair(float), help="seconds LOW..HIGH (default 4..8; quick 2..4)"
    )
    parser.add_argument("--stream-seconds", type=float, help="default 40; quick 6")
    parser.add_argument("--rate", type=float, help="stream jobs a second (default 3.5; quick 2)")
    parser.add_argument("--stream-cpus", type=_pair(int), help="LOW..HIGH (default 1..2)")
    parser.add_argument(
        "--stream-runtime", type=_pair(float), help="seconds LOW..HIGH (default 1..3; quick 1..2)"
    )
    parser.add_argument("--priority-per-minute", type=int, default=6000)
    parser.add_argument("--reserve-after", type=float, help="seconds (default 5; quick 2)")
    parser.add_argument("--drain-timeout", type=float, help="seconds (default 120; quick 30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mode", choices=("both", "on", "off"), default="both")
    parser.add_argument("--per-job", action="store_true", help="also print each managed job")
    args = parser.parse_args(argv)

    def pick(value: Any, default: Any, quick: Any) -> Any:
        return value if value is not None else (quick if args.quick else default)

    scenario = Scenario(
        cpus=pick(args.cpus, 8, 4),
        managed=pick(args.managed, 8, 3),
        managed_cpus=pick(args.managed_cpus, (1, 4), (1, 2)),
        managed_runtime=pick(args.managed_runtime, (4.0, 8.0), (2.0, 4.0)),
        stream_seconds=pick(args.stream_seconds, 40.0, 6.0),
        rate=pick(args.rate, 3.5, 2.0),
        stream_cpus=pick(args.stream_cpus, (1, 2), (1, 2)),
        stream_runtime=pick(args.stream_runtime, (1.0, 3.0), (1.0, 2.0)),
        priority_per_minute=args.priority_per_minute,
        reserve_after=pick(args.reserve_after, 5.0, 2.0),
        drain_timeout=pick(args.drain_timeout, 120.0, 30.0),
        seed=args.seed,
    )
    if scenario.managed_cpus[1] > scenario.cpus or scenario.stream_cpus[1] > scenario.cpus:
        parser.error("a job larger than the ClusterQueue's quota would never be admitted")
    console.print(
        f"ClusterQueue {scenario.cpus} CPUs; {scenario.managed} managed jobs"
        f" {scenario.managed_cpus[0]}..{scenario.managed_cpus[1]} CPUs,"
        f" {scenario.managed_runtime[0]:g}..{scenario.managed_runtime[1]:g}s; stream"
        f" {scenario.rate:g}/s for {scenario.stream_seconds:g}s,"
        f" {scenario.stream_cpus[0]}..{scenario.stream_cpus[1]} CPUs,"
        f" {scenario.stream_runtime[0]:g}..{scenario.stream_runtime[1]:g}s"
        f" (offered load {scenario.offered_load:.2f}x quota); seed {scenario.seed}"
    )
    modes = [
        ("ON", scenario.ageing_on, scenario.reserve_after),
        ("OFF", AGEING_OFF, None),
    ]
    results = [
        run_mode(mode, ageing, scenario, reserve)
        for mode, ageing, reserve in modes
        if args.mode in ("both", mode.lower())
    ]
    for result in results:
        print_result(result, per_job=args.per_job)
    return 0 if all(r.analysis.repeated_pairs == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
