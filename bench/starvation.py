"""Benchmark: the starvation bound against an adversary, 100,000 jobs on the decision cores.

Runs ``--runs`` worlds of ``--jobs`` arrivals each (bench/starvation_world.py), each with its
own policy and shape drawn from ``--seed``: 1-4 ClusterQueues of 2-16 CPUs kept full by
high-priority streams, managed and plain jobs of random priorities, sizes and runtimes,
reserveAfter 0-30 s, protectFor 0-8 s, minimumRunTime 0-4 s, grace 0-5 s, 1-4 preemptions
an hour, maxReservedShare 25-100%. Prints one line per world and the totals; exits 1 on any
violation (an aged workload admitted after a bound it was shown, a run preempted inside its
protection, a workload over its preemption budget, reservations over their share), and
the waits that showed no bound by why (the last reason shown: the bound is claimed only
where its conditions hold, docs/ageing.md).

    .venv/bin/python bench/starvation.py                  # 20 x 5,000 jobs, a process per core
    .venv/bin/python bench/starvation.py --runs 2 --jobs 1000
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from bench.starvation_world import Params, Report, simulate

console = Console(highlight=False, width=120)


def draw(rng: random.Random, seed: int, jobs: int) -> Params:
    return Params(
        seed=seed,
        jobs=jobs,
        queues=rng.randint(1, 4),
        nominal=(2, rng.randint(4, 16)),
        pressure=rng.randint(1, 4),
        waves=(rng.choice([30.0, 120.0]), rng.choice([5.0, 30.0])),
        managed=rng.choice([0.3, 0.5, 0.7]),
        runtime=(0.5, rng.choice([5.0, 30.0, 120.0])),
        reserve_after=rng.choice([0.0, 5.0, 30.0]),
        protect_for=rng.choice([0.0, 2.0, 8.0]),
        minimum_run_time=rng.choice([0.0, 1.0, 4.0]),
        grace=rng.choice([0.0, 2.0, 5.0]),
        per_hour=rng.randint(1, 4),
        share=rng.choice([0.25, 0.5, 0.75, 1.0]),
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 50):.1f} / {percentile(values, 90):.1f} / {max(values):.1f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=5_000, help="arrivals per world")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1,
        help="worlds simulated at once, one process each (default: one per core)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    worlds = [draw(rng, args.seed * 1000 + run, args.jobs) for run in range(args.runs)]
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        reports: list[Report] = list(pool.map(simulate, worlds))
    table = Table(title="worlds", title_justify="left")
    for column in ("seed", "CQs", "share", "budget", "waits", "bounded", "min slack",
                   "longest", "bad", "took"):  # fmt: skip
        table.add_column(column, justify="right")
    for params, report in zip(worlds, reports, strict=True):
        table.add_row(
            str(params.seed),
            str(params.queues),
            f"{params.share:.0%}",
            str(params.per_hour),
            str(report.aged_waits),
            str(report.bounded_waits),
            f"{min(report.slack):.1f} s" if report.slack else "-",
            f"{report.longest_bounded_wait:.0f} s",
            str(len(report.violations)),
            f"{report.seconds:.1f} s",
        )
    console.print(table)
    total = Table(title="all worlds", title_justify="left")
    total.add_column("metric")
    total.add_column("value", justify="right")
    jobs = sum(r.arrived for r in reports)
    admissions = sum(r.admissions for r in reports)
    preemptions = sum(r.preemptions for r in reports)
    reservation = sum(r.reservation_preemptions for r in reports)
    waits = sum(r.aged_waits for r in reports)
    bounded = sum(r.bounded_waits for r in reports)
    slack = [s for r in reports for s in r.slack]
    useful = sum(r.useful_cpu_seconds for r in reports)
    quota = sum(r.quota_cpu_seconds for r in reports)
    violations = [v for r in reports for v in r.violations]
    total.add_row("jobs (all ran to the end)", f"{jobs:,} ({sum(r.finished for r in reports):,})")
    total.add_row(
        "worlds (seeds)", f"{len(reports)} ({args.seed * 1000}-{args.seed * 1000 + args.runs - 1})"
    )
    total.add_row("admissions / preemptions", f"{admissions:,} / {preemptions:,}")
    total.add_row("  preemptions per admission", f"{preemptions / max(1, admissions):.3f}")
    total.add_row("  of them for a reservation", f"{reservation:,}")
    total.add_row("waits / with a bound shown", f"{waits:,} / {bounded:,}"
                  f" ({bounded / max(1, waits):.1%})")  # fmt: skip
    unbounded: dict[str, int] = {}
    for report in reports:
        for why, count in report.unbounded.items():
            unbounded[why] = unbounded.get(why, 0) + count
    for why, count in sorted(unbounded.items(), key=lambda item: -item[1]):
        total.add_row(f"  no bound: {why}", f"{count:,} ({count / max(1, waits):.1%})")
    for kind in ("high", "managed", "plain"):
        count = sum(r.bounded_by_kind.get(kind, 0) for r in reports)
        total.add_row(f"  bounded waits of {kind} workloads", f"{count:,}")
    total.add_row("  bound - admission: min / p50", f"{min(slack, default=math.nan):.1f} /"
                  f" {percentile(slack, 50):.1f} s")  # fmt: skip
    total.add_row("waits high p50/p90/max", spread([w for r in reports for w in r.waits["high"]]))
    total.add_row("waits low p50/p90/max", spread([w for r in reports for w in r.waits["low"]]))
    total.add_row("useful work (finished CPU-s / quota CPU-s)", f"{useful / max(1.0, quota):.2f}")
    colour = "green" if not violations else "red"
    total.add_row("violations (expected 0)", f"[{colour}]{len(violations)}[/]")
    total.add_row(
        "took (wall; the machine may be shared)", f"{time.perf_counter() - started:.1f} s"
    )
    total.add_row(
        f"  CPU, {args.workers} worker(s)", f"{sum(r.cpu_seconds for r in reports):.1f} s"
    )
    console.print(total)
    for violation in violations[:20]:
        console.print(f"[red]{violation}[/]")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
