"""How Berth's cost grows with the load: Kueue's large-scale scenario at several sizes.

Runs bench/kueue_scheduler.py's large-scale scenario (1,000 ClusterQueues in 10 cohorts) on
the live stack once per size, each stream's workloads multiplied by the size (the same
arrival rates, a longer burst), and prints per size: wall time, CPU per workload of the four
services (and with nats-server), bus messages per workload (every JetStream stream), events
per workload, and whether quota was ever over-committed; then the ratio of CPU per workload
at the largest size to the size a quarter of it (target <= 1.2: the cost per workload does
not grow with the load).

    .venv/bin/python bench/scaling.py                       # sizes 0.125, 0.25, 0.5, 1 (6,500-50,000)
    .venv/bin/python bench/scaling.py --sizes 0.5,1,2,4     # the issue's run (26,000-200,000)

A size is a fraction of the full scenario (50,000 workloads); each stream's count is rounded,
so 0.5 is 26,000 workloads. The wall time is judged against the large-scale goal scaled the
same way (10 s x size), never the full-size goal. The machine is shared: read CPU per
workload, not the wall time, when other work runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kueue_config import LARGE_SCALE
from bench.kueue_measure import SERVICE_NAMES, copies_kept
from bench.kueue_report import RunResult
from bench.kueue_scheduler import run_benchmark

WALL_GOAL_S = 10.0  # make bench-kueue-large, full size (issue 20)
CPU_GOAL_MS = 0.2  # service CPU per workload, any size
RATIO_GOAL = 1.2


def sizes(text: str) -> list[float]:
    try:
        values = sorted(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid sizes {text!r} (use e.g. 0.5,1,2,4)") from None
    if not values or values[0] <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be above 0: {text!r}")
    return values


def cpu_ms(result: RunResult, *, with_nats: bool = False) -> float:
    names = (*SERVICE_NAMES, "nats-server") if with_nats else SERVICE_NAMES
    cpu = sum(c for name, (c, _) in result.processes.items() if name in names)
    return cpu / max(1, result.workloads) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=sizes, default=sizes("0.125,0.25,0.5,1"))
    parser.add_argument("--timeout", type=float, default=1800.0, help="per size, seconds")
    args = parser.parse_args(argv)
    header = (
        f"{'size':>6} {'workloads':>9} {'wall s':>7} {'goal s':>7} {'CPU ms/wl':>9}"
        f" {'+nats':>7} {'msgs/wl':>7} {'events/wl':>9} {'over-committed':>14}"
    )
    print(
        f"Kueue large-scale scenario at sizes {', '.join(f'{s:g}' for s in args.sizes)};"
        f" per-workload copies kept (BERTH_BUS_COPIES): {copies_kept()}"
    )
    print(header)
    per_workload: dict[float, float] = {}
    failed = False
    for size in args.sizes:
        config = LARGE_SCALE.scaled(size)
        try:
            result = run_benchmark(
                config, out_dir=None, timeout=args.timeout, label=f"scaling-x{size:g}"
            )
        except (RuntimeError, TimeoutError) as error:  # one size failing ends no other
            print(f"{size:>6g} {config.total_workloads:>9,} run failed: {error}", flush=True)
            failed = True
            continue
        workloads = max(1, result.workloads)
        per_workload[size] = cpu_ms(result)
        goal = WALL_GOAL_S * size
        failed = failed or result.violations > 0 or result.finished != result.workloads
        print(
            f"{size:>6g} {result.workloads:>9,} {result.wall:>7.1f}"
            f" {goal:>6.1f}{'' if result.wall <= goal else '!'} {per_workload[size]:>9.3f}"
            f" {cpu_ms(result, with_nats=True):>7.3f}"
            f" {sum(result.bus_messages.values()) / workloads:>7.2f}"
            f" {result.events / workloads:>9.2f}"
            f" {'no' if result.violations == 0 else f'YES ({result.violations})':>14}",
            flush=True,
        )
        by_service = ", ".join(
            f"{name} {cpu / workloads * 1000:.3f}"
            for name, (cpu, _) in result.processes.items()
            if name in (*SERVICE_NAMES, "nats-server")
        )
        print(f"{'':>6} CPU ms per workload: {by_service}", flush=True)
    print("('!' after a goal: the wall time missed it; goal = 10 s x size, the large-scale")
    print(f" goal scaled like the run; service CPU per workload goal {CPU_GOAL_MS} ms at any size)")
    largest = args.sizes[-1]
    base = largest / 4
    if base in per_workload and per_workload[base] > 0:
        ratio = per_workload[largest] / per_workload[base]
        verdict = "met" if ratio <= RATIO_GOAL else "MISSED"
        print(
            f"CPU per workload at {largest:g} / at {base:g} (4x the load): {ratio:.2f}"
            f" (target <= {RATIO_GOAL}: {verdict})"
        )
    else:
        print(f"no size a quarter of {largest:g}: no 4x ratio")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
