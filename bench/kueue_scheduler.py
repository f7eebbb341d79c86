"""Kueue's scheduler performance benchmark, reproduced on the live Berth stack.

    .venv/bin/python bench/kueue_scheduler.py --config baseline|large-scale [--scale 0.1] [--console]

Starts ``berth up`` programmatically (nats-server and the four services as processes), writes
the scenario's ResourceFlavor, ClusterQueues (in cohorts), Namespaces and LocalQueues into the
config bucket, then runs three independent creation streams per ClusterQueue (sleep the
interval, then create the Job in the objects bucket, as Kueue's generator does; without a
client limit each class's streams run as one loop: bench/kueue_drive.py). Each Job is
annotated with its simulated run time, so the watcher starts it at admission and finishes it
after that time; a preempted Job starts from zero when it is admitted again. The run ends when
every workload has finished; then the event log is read and checked (quota never
over-committed) and the metrics are printed beside Kueue's published figures and the ideal
schedule (bench/kueue_ideal.py). The per-workload timeline goes to bench/out/. The scenario's
objects and the drive are in bench/kueue_drive.py, what is measured of the processes and the
bus in bench/kueue_measure.py, the figures and tables in bench/kueue_report.py.

``--console`` also starts the web console (as `berth up` does) and keeps one client on the
overview's server-sent-event stream for the whole run, to show what a watching operator costs
admission (docs/console.md, "Cost").

Metrics (see /work/shared/KUEUE-PERF-BENCH.md): wall time (the services' start to their exit;
NATS, like Kueue's envtest, is up before the clock starts);
pooled ClusterQueue usage as Kueue's checker computes it (admitted CPU x time over nominal x
window); goodput (useful CPU-seconds over the same denominator); average time to admission
per class (creationTimestamp to the last admission, millisecond resolution); evictions per
class; admissions per second at peak (1 s bins); CPU seconds and peak RSS of each process.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from bench.eventlog import (
    published_by_subject,
    read_events,
)
from bench.kueue_config import CONFIGS, ScenarioConfig
from bench.kueue_drive import (
    CLASS_LABEL,
    RUNTIME_LABEL,
    config_documents,
    created_records,
    drive,
    parse_wait_targets,
)
from bench.kueue_ideal import simulate_ideal
from bench.kueue_measure import (
    SERVICE_NAMES,
    consumer_reads,
    idle_startup_cpu,
    proc_stats,
    services_collector,
    stream_messages,
)
from bench.kueue_report import GOALS, RunResult, compute, render, render_subjects
from berth_cli.up import Stack
from shared.events import encode_event

__all__ = [
    "CLASS_LABEL",
    "GOALS",
    "RUNTIME_LABEL",
    "SERVICE_NAMES",
    "RunResult",
    "config_documents",
    "main",
    "parse_wait_targets",
    "render",
    "run_benchmark",
]

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
# This process to the end of the run: its imports and the ideal schedule as well as the drive.
GENERATOR = "bench (generator, whole process)"
# The machine is shared: printed under every run, with the load average at its end.
LOAD_CAVEAT = (
    "Caveat: load average at the end {load} (1/5/15 min) on a shared machine; other work"
    " inflates wall time more than CPU per workload."
)


def run_benchmark(
    config: ScenarioConfig,
    *,
    data_dir: Path | None = None,
    out_dir: Path | None = OUT,
    timeout: float = 900.0,
    label: str | None = None,
    with_console: bool = False,
    creations_per_s: float | None = None,
    save_events: Path | None = None,
    measure_startup: bool = True,
) -> RunResult:
    ideal = simulate_ideal(config)
    owned_tmp = None
    if data_dir is None:
        owned_tmp = tempfile.TemporaryDirectory(prefix="berth-bench-")
        data_dir = Path(owned_tmp.name)
    stack = Stack(
        data_dir=data_dir, nats_port=0, console=Console(quiet=True), with_console=with_console
    )
    stopped_in = 0.0
    try:
        # As Kueue's runner: the store (envtest there, NATS here) is up before the clock
        # starts; the scheduler's processes and the generator start together, and the
        # generator does not wait for them to be ready.
        stack.start_nats()
        started = time.monotonic()
        stack.spawn_services()
        with services_collector():
            drive_result = asyncio.run(
                drive(
                    stack.nats_url, config, stack, limit_s=timeout, creations_per_s=creations_per_s
                )
            )
        startup = drive_result.ready - started
        done = time.monotonic()
        processes: dict[str, tuple[float, float]] = {}
        if stack.nats.process is not None:
            processes["nats-server"] = proc_stats(stack.nats.process.pid)
        for service in stack.services:
            assert service.process is not None
            processes[service.name] = proc_stats(service.process.pid)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        processes[GENERATOR] = (usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
        reads = asyncio.run(consumer_reads(stack))
        events = asyncio.run(read_events(stack.nats_url, auth=stack.admin_auth))
        bus_messages = asyncio.run(stream_messages(stack.nats_url, stack))
    finally:
        stop_started = time.monotonic()
        stack.stop()
        stopped_in = time.monotonic() - stop_started
        if owned_tmp is not None:
            owned_tmp.cleanup()
    wall = (done - started) + stopped_in  # reading the log is not part of the run
    if save_events is not None:  # one event per line, for replays (bench/preemption_replay.py)
        save_events.write_bytes(b"".join(encode_event(e) + b"\n" for e in events))
    created = created_records(config, drive_result.made)
    metrics = compute(config, drive_result, created, events)
    timeline = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        timeline = out_dir / f"{label or config.name}-timeline.csv"
        with timeline.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                [
                    "uid",
                    "name",
                    "cluster_queue",
                    "cohort",
                    "class",
                    "cpu",
                    "runtime_ms",
                    "created_s",
                    "first_admitted_s",
                    "last_admitted_s",
                    "admissions",
                    "last_started_s",
                    "finished_s",
                ]
            )
            writer.writerows(metrics["rows"])
    return RunResult(
        config=config,
        wall=wall,
        startup=startup,
        idle_startup_cpu=idle_startup_cpu() if measure_startup else None,
        drain_stop=stopped_in,
        window=metrics["window"],
        usage_pct=metrics["usage_pct"],
        goodput_pct=metrics["goodput_pct"],
        avg_wait=metrics["avg_wait"],
        max_wait=metrics["max_wait"],
        evictions=metrics["evictions"],
        peak_admissions_per_s=metrics["peak_admissions_per_s"],
        processes=processes,
        avg_first_wait=metrics["avg_first_wait"],
        bus_messages=bus_messages,
        violations=len(metrics["violations"]),
        peak_cohort_cpu=metrics["peak_cohort_cpu"],
        cohort_limit_cpu=metrics["cohort_limit_cpu"],
        workloads=len(created),
        finished=metrics["finished"],
        events=len(events),
        creation_span=(max(c.created for c in created) - min(c.created for c in created))
        if created
        else 0.0,
        timeline=timeline,
        ideal=ideal,
        by_type=metrics["by_type"],
        start_lag=metrics["start_lag"],
        overhold=metrics["overhold"],
        console_messages=drive_result.console_messages,
        creations_per_s=creations_per_s,
        published=published_by_subject(events),
        reads=reads,
        generator_cpu=(drive_result.cpu_creating, drive_result.cpu),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="baseline")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of each stream's workloads"
    )
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--no-preemption",
        action="store_true",
        help="both ClusterQueue preemption policies Never (not Kueue's scenario: the spec's"
        " ideal schedule assumes no preemption)",
    )
    parser.add_argument(
        "--borrowing-yields",
        action="store_true",
        help="Berth's opt-in borrowingYieldsToHigherPriority (not Kueue's behaviour)",
    )
    parser.add_argument(
        "--strict-fifo", action="store_true", help="ClusterQueues with queueingStrategy StrictFIFO"
    )
    parser.add_argument(
        "--wait-targets",
        type=parse_wait_targets,
        default=(),
        metavar="PRIORITY=WAIT,...,WAIT",
        help="Berth's opt-in deadline order (Configuration.spec.admission.waitTargets)",
    )
    parser.add_argument(
        "--console",
        action="store_true",
        help="start the web console too, with one client on the overview's live stream",
    )
    parser.add_argument(
        "--creations-per-s",
        type=float,
        default=None,
        metavar="N",
        help="cap the generator's creations at N per second across all streams, as Kueue's"
        " client does in its published runs (50)",
    )
    parser.add_argument(
        "--save-events", type=Path, default=None, metavar="FILE", help="the event log, one per line"
    )
    args = parser.parse_args(argv)
    if args.creations_per_s is not None and args.creations_per_s <= 0:
        parser.error(f"--creations-per-s must be above 0, not {args.creations_per_s:g}")
    config = CONFIGS[args.config]
    label = config.name
    if args.scale != 1.0:
        config = config.scaled(args.scale)
        label = f"{config.name}-x{args.scale:g}"
    if args.no_preemption:
        config = config.without_preemption()
        label = f"{label}-no-preemption"
    if args.borrowing_yields:
        config = replace(config, borrowing_yields=True)
        label = f"{label}-borrowing-yields"
    if args.strict_fifo:
        config = replace(config, strict_fifo=True)
        label = f"{label}-strict-fifo"
    if args.wait_targets:
        config = replace(config, wait_targets=args.wait_targets)
        label = f"{label}-wait-targets"
    if args.console:
        label = f"{label}-console"
    if args.creations_per_s is not None:
        label = f"{label}-{args.creations_per_s:g}-per-s"
    result = run_benchmark(
        config,
        data_dir=args.data_dir,
        out_dir=args.out,
        timeout=args.timeout,
        label=label,
        with_console=args.console,
        creations_per_s=args.creations_per_s,
        save_events=args.save_events,
    )
    print(render(result))
    print()
    print(render_subjects(result))
    print(LOAD_CAVEAT.format(load=" / ".join(f"{v:.2f}" for v in os.getloadavg())))
    return 0 if result.violations == 0 and result.finished == result.workloads else 1


if __name__ == "__main__":
    raise SystemExit(main())
