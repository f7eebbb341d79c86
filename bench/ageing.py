"""Benchmark: preempted managed jobs' waits, with and without ageing, on the live stack.

For each mode (ageing ON, then OFF) it starts a fresh `berth up` (temp data dir, NATS on a
free port), applies one ClusterQueue of ``--cpus`` CPUs (``withinClusterQueue:
LowerPriority``) with a ClusterQueuePolicy, launches ``--managed`` low-priority managed jobs
(`berth jobs launch` of a batch/v1 Job with a ``berth.dev/simulated-runtime``), then streams
high-priority plain jobs (Poisson arrivals, seeded) for ``--stream-seconds`` and drains until
every managed job has ended (or ``--drain-timeout``). From the event log it computes, per
managed job, its preemptions and each wait (WorkloadEvicted -> next WorkloadAdmitted; a wait
still open at the end of the run is *censored* and counted up to the end), the stream's
waits, readmissions preempted again within a second, preemptions per admission, useful work,
each managed wait against the bound admission showed for it (``RUNS BY``, replayed from the
log), and the price: the largest share of the quota running reservations held
(bench/ageing_report.py). Run:

    .venv/bin/python bench/ageing.py            # both modes, ~2-3 min on 2 cores
    .venv/bin/python bench/ageing.py --quick    # ~30 s smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
import yaml
from rich.console import Console

from bench.ageing_report import Result, analyse, print_results
from bench.eventlog import read_events, signed_in_as
from berth_cli.launcher import start_stack
from berth_cli.main import cli
from berth_cli.writing import submit_workloads
from shared.auth import ClientAuth
from shared.bus import JOBS_BUCKET, Bus
from shared.config import load_documents, parse_object
from shared.events import AnyEvent
from shared.jobs import TERMINAL, ManagedJob, decode_job, job_key

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "default"

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
  evictionGracePeriod: 1s  # the local backend stops a simulated run at once
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
    protect_for: float
    share: float
    max_boost: int | None
    drain_timeout: float
    seed: int

    @property
    def ageing_on(self) -> str:
        return (
            f"{{priorityPerMinute: {self.priority_per_minute},"
            f" reserveAfter: {_duration(self.reserve_after)},"
            f" protectFor: {_duration(self.protect_for)}, maxReservedShare: {self.share}"
            + ("" if self.max_boost is None else f", maxBoost: {self.max_boost}")
            + "}"
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


async def event_log(url: str, auth: ClientAuth) -> list[AnyEvent]:
    """Every event in the stream, in order."""
    return await read_events(url, auth=auth)


# --- one mode -------------------------------------------------------------------------------


def run_mode(mode: str, ageing: str, scenario: Scenario) -> Result:
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
                setup = SETUP.replace("CPUS", str(scenario.cpus)).replace("AGEING", ageing)
                (work / "setup.yaml").write_text(setup)
                berth("apply", "-f", str(work / "setup.yaml"), url=url)
                started = time.monotonic()
                ids = launch_managed(url, scenario, rng, work)
                asyncio.run(wait_some_running(url, ids, admin))
                note(f"{len(ids)} managed jobs launched; streaming")
                count, _ = asyncio.run(stream(url, scenario, rng))
                note(f"{count} stream jobs submitted; draining")
                records = asyncio.run(drain(url, ids, admin, scenario.drain_timeout))
                end = datetime.now(UTC)
                seconds = time.monotonic() - started
                drained = all(r.status in TERMINAL for r in records.values())
                events = asyncio.run(event_log(url, admin))
                note(f"drained; {len(events)} events read; stopping the stack")
        finally:
            stack.stop()
    note("stopped")
    config = [parse_object(d) for d in load_documents(setup, source="setup.yaml")]
    return Result(
        mode=mode,
        policy=ageing,
        stream_jobs=count,
        seconds=seconds,
        drained=drained,
        analysis=analyse(events, records, end, config=config, cpus=scenario.cpus),
    )


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
    parser.add_argument("--protect-for", type=float, default=3.0, help="seconds (default 3)")
    parser.add_argument("--share", type=float, default=0.5, help="maxReservedShare (0.5)")
    # Below the high class (100 + 800 < 1000): only a reservation takes room from it. A boost
    # above it gets a job in only to lose the room once protectFor ends (docs/ageing.md).
    parser.add_argument("--max-boost", type=int, default=800, help="maxBoost (800; -1: none)")
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
        protect_for=args.protect_for,
        share=args.share,
        max_boost=None if args.max_boost < 0 else args.max_boost,
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
    modes = [("ON", scenario.ageing_on), ("OFF", AGEING_OFF)]
    results = [
        run_mode(mode, ageing, scenario)
        for mode, ageing in modes
        if args.mode in ("both", mode.lower())
    ]
    print_results(results, share=scenario.share, per_job=args.per_job)
    # A shown bound missed, or a victim and its preemptor meeting twice, is a failure.
    failed = any(r.analysis.repeated_pairs or r.analysis.bounds.late for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
