"""Kueue's scheduler benchmark's figures from a run (``compute``: waits, usage, goodput,
evictions, peaks, from the event log and the creates' records) and the tables it prints
beside Kueue's published figures and the ideal schedule (``render``, ``render_subjects``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.eventlog import (
    Published,
    quota_violations,
)
from bench.kueue_config import CONFIGS, ScenarioConfig
from bench.kueue_drive import Created, DriveResult
from bench.kueue_ideal import IdealResult
from bench.kueue_measure import SERVICE_NAMES, copies_kept
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadStarted,
)

# Published ideal figures (spec section 6); the simulated ideal is computed, these are quoted.
SPEC_IDEAL = {
    "baseline": {"wall": 67.0, "small": 19.5, "medium": 16.1, "large": 0.7},
    "large-scale": {"wall": 4.6, "small": 2.0, "medium": 1.4, "large": 0.1},
}
GOALS = {
    "baseline": {"wall": 77.0, "small": 25.0, "medium": 21.0, "large": 2.0},
    "large-scale": {"wall": 60.0},
}


@dataclass
class RunResult:
    config: ScenarioConfig
    wall: float
    startup: float
    idle_startup_cpu: float | None  # the four services' CPU s to readiness on an idle stack
    drain_stop: float
    window: float
    usage_pct: float
    goodput_pct: float
    avg_wait: dict[str, float]
    max_wait: dict[str, float]
    evictions: dict[str, int]
    peak_admissions_per_s: int
    processes: dict[str, tuple[float, float]]
    avg_first_wait: dict[str, float]
    bus_messages: dict[str, int]
    violations: int
    peak_cohort_cpu: float
    cohort_limit_cpu: float
    workloads: int
    finished: int
    events: int
    creation_span: float
    timeline: Path | None
    ideal: IdealResult
    by_type: dict[str, int]
    start_lag: tuple[float, float, int]  # mean, p99, samples
    overhold: tuple[float, float, int]
    notes: list[str] = field(default_factory=list)
    console_messages: int | None = None  # None: run without the console
    creations_per_s: float | None = None  # the generator's client limit, if any
    published: dict[str, Published] = field(default_factory=dict)  # subject family -> events
    reads: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)  # see above
    generator_cpu: tuple[float, float] | None = None  # DriveResult's cpu_creating, cpu


def _mean_p99(values: list[float]) -> tuple[float, float, int]:
    if not values:
        return (0.0, 0.0, 0)
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (sum(ordered) / len(ordered), p99, len(ordered))


def _mean_p99_text(figures: tuple[float, float, int]) -> str:
    """Mean / p99 in ms; a p99 of fewer than 1,000 samples would not mean what it says."""
    mean, p99, samples = figures
    if samples < 1_000:
        return f"{mean * 1000:,.0f} / - (p99 needs 1,000 samples, {samples:,} here)"
    return f"{mean * 1000:,.0f} / {p99 * 1000:,.0f} ({samples:,} samples)"


def compute(
    config: ScenarioConfig,
    drive_result: DriveResult,
    created: list[Created],
    events: list[AnyEvent],
) -> dict[str, Any]:
    by_uid = {c.uid: c for c in created}
    admissions: dict[str, list[float]] = defaultdict(list)
    started: dict[str, float] = {}
    finished_at: dict[str, float] = {}
    evicted: dict[str, int] = defaultdict(int)
    holding: dict[str, tuple[int, float]] = {}  # uid -> (generation, admitted at)
    cpu_time = 0.0  # CPU-seconds of quota held (Kueue's usage integral, pooled)
    last_event = drive_result.t_config
    seen_evictions: set[tuple[str, int]] = set()
    admit_times: list[float] = []
    by_type: dict[str, int] = defaultdict(int)
    start_lag: list[float] = []  # admitted -> started (the watcher's reaction)
    overhold: list[float] = []  # quota held beyond the run time, per finished run
    last_admit: dict[str, float] = {}
    for event in events:
        by_type[f"{type(event).__name__}/{event.source}"] += 1
        uid = event.workload.uid
        info = by_uid.get(uid)
        if info is None:
            continue
        t = event.time.timestamp()
        if isinstance(event, WorkloadAdmitted):
            held = holding.get(uid)
            if held is not None and held[0] >= event.generation:
                continue
            holding[uid] = (event.generation, t)
            last_admit[uid] = t
            admissions[uid].append(t)
            admit_times.append(t)
            last_event = max(last_event, t)
        elif isinstance(event, WorkloadFinished | WorkloadEvicted):
            held = holding.get(uid)
            if held is None or held[0] != event.generation:
                continue
            del holding[uid]
            cpu_time += info.cpu * max(0.0, t - held[1])
            last_event = max(last_event, t)
            if isinstance(event, WorkloadFinished):
                finished_at[uid] = t
                overhold.append(t - held[1] - info.runtime_ms / 1000.0)
            elif (uid, event.generation) not in seen_evictions:
                seen_evictions.add((uid, event.generation))
                evicted[info.klass] += 1
        elif isinstance(event, WorkloadStarted):
            started[uid] = t
            if uid in last_admit:
                start_lag.append(t - last_admit[uid])
    window = max(1e-9, last_event - drive_result.t_config)
    nominal = config.nominal_cpu * config.cohorts * config.cqs_per_cohort
    useful = sum(by_uid[uid].cpu * by_uid[uid].runtime_ms / 1000.0 for uid in finished_at)
    waits: dict[str, list[float]] = defaultdict(list)
    first_waits: dict[str, list[float]] = defaultdict(list)
    for uid, times in admissions.items():
        info = by_uid[uid]
        waits[info.klass].append(times[-1] - info.created)
        first_waits[info.klass].append(times[0] - info.created)
    bins: dict[int, int] = defaultdict(int)
    for t in admit_times:
        bins[int(t - drive_result.t_config)] += 1
    cq_limit = {
        cq: (config.nominal_cpu + config.borrowing_limit_cpu) * 1000
        for cq, _ in config.cluster_queues()
    }
    cohort_of = dict(config.cluster_queues())
    cohort_limit = {
        cohort: config.nominal_cpu * config.cqs_per_cohort * 1000 for cohort in cohort_of.values()
    }
    violations, peak = quota_violations(
        events, cq_limit=cq_limit, cohort_of=cohort_of, cohort_limit=cohort_limit
    )
    return {
        "window": window,
        "usage_pct": 100.0 * cpu_time / (nominal * window),
        "goodput_pct": 100.0 * useful / (nominal * window),
        "avg_wait": {k: sum(v) / len(v) for k, v in waits.items()},
        "max_wait": {k: max(v) for k, v in waits.items()},
        "avg_first_wait": {k: sum(v) / len(v) for k, v in first_waits.items()},
        "evictions": {c.name: evicted.get(c.name, 0) for c in config.classes},
        "peak_admissions_per_s": max(bins.values(), default=0),
        "violations": violations,
        "peak_cohort_cpu": max(peak.values(), default=0) / 1000,
        "cohort_limit_cpu": config.nominal_cpu * config.cqs_per_cohort,
        "finished": len(finished_at),
        "by_type": dict(sorted(by_type.items(), key=lambda item: -item[1])),
        "start_lag": _mean_p99(start_lag),
        "overhold": _mean_p99(overhold),
        "rows": [
            (
                c.uid,
                c.name,
                c.cluster_queue,
                c.cohort,
                c.klass,
                c.cpu,
                c.runtime_ms,
                round(c.created - drive_result.t_config, 4),
                round(admissions[c.uid][0] - drive_result.t_config, 4)
                if admissions.get(c.uid)
                else "",
                round(admissions[c.uid][-1] - drive_result.t_config, 4)
                if admissions.get(c.uid)
                else "",
                len(admissions.get(c.uid, [])),
                round(started[c.uid] - drive_result.t_config, 4) if c.uid in started else "",
                round(finished_at[c.uid] - drive_result.t_config, 4)
                if c.uid in finished_at
                else "",
            )
            for c in created
        ],
    }


# --- the table ----------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(result: RunResult) -> str:
    config = result.config
    spec = SPEC_IDEAL.get(config.name, {})
    goals = GOALS.get(config.name, {})
    mean, threshold = config.kueue_mean, config.kueue_threshold
    rows: list[tuple[str, str, str, str, str, str, str]] = []

    def row(
        name: str,
        berth: str,
        ideal: str = "-",
        spec_ideal: str = "-",
        kueue: str = "-",
        limit: str = "-",
        goal: str = "-",
    ) -> None:
        rows.append((name, berth, ideal, spec_ideal, kueue, limit, goal))

    # A scaled run is judged against goals scaled the same way, never the full-size ones:
    # the wall time follows the streams' length (count x interval), so its goal and Kueue's
    # figures scale with the run; the waits do not scale linearly and are not judged.
    full = CONFIGS.get(config.name)
    scale = config.total_workloads / full.total_workloads if full is not None else 1.0
    scaled = abs(scale - 1.0) > 1e-9

    def goal_of(key: str, value: float) -> str:
        if key not in goals:
            return "-"
        if result.creations_per_s is not None:
            return "not judged: compare with Kueue (same client limit)"
        if scaled and key != "wall":
            return "not judged (scaled run)"
        goal = goals[key] * (scale if key == "wall" else 1.0)
        ok = "ok" if value <= goal else "MISSED"
        return f"<= {goal:g}{f' (x{scale:.3g})' if scaled else ''} {ok}"

    kueue_wall = mean.get("wall")
    row(
        "wall time (s)",
        _fmt(result.wall),
        _fmt(result.ideal.wall),
        _fmt(spec.get("wall")),
        _fmt(kueue_wall)
        if not scaled or kueue_wall is None
        else f"{kueue_wall * scale:,.1f} (x{scale:.3g})",
        f"<= {threshold['wall'] * (scale if scaled else 1.0):,.0f}",
        goal_of("wall", result.wall),
    )
    row(
        "CQ usage, Kueue's checker (%)",
        _fmt(result.usage_pct),
        "-",
        "-",
        _fmt(mean.get("usage")),
        f">= {threshold['usage']:g}",
    )
    row("goodput: useful CPU-s / quota x window (%)", _fmt(result.goodput_pct))
    for klass in config.classes:
        name = klass.name
        value = result.avg_wait.get(name, float("nan"))
        row(
            f"avg time to admission, {name} (s)",
            f"{_fmt(value, 2)} (max {_fmt(result.max_wait.get(name), 1)})",
            f"{_fmt(result.ideal.avg_wait(name), 2)} (max {_fmt(result.ideal.max_wait(name), 1)})",
            _fmt(spec.get(name)),
            _fmt(mean.get(name), 1),
            f"<= {threshold[name]:g}",
            goal_of(name, value),
        )
    for klass in config.classes:
        first = result.avg_first_wait.get(klass.name, float("nan"))
        row(f"  the same to the first admission, {klass.name} (s)", _fmt(first, 2))
    for klass in config.classes:
        row(f"evictions, {klass.name}", str(result.evictions.get(klass.name, 0)), "0")
    row("admissions/s at peak (1 s bins)", str(result.peak_admissions_per_s))
    for name, (cpu, rss) in result.processes.items():
        row(f"{name}: CPU s / peak RSS MiB", f"{_fmt(cpu)} / {_fmt(rss, 0)}")
    if result.generator_cpu is not None:
        creating, driving = result.generator_cpu
        row(
            "  the generator's CPU s to its last create (from the services' spawn)",
            _fmt(creating, 2),
        )
        row("  the generator's CPU s to the last finish (the drive)", _fmt(driving, 2))
    workloads = max(1, result.workloads)
    services = sum(cpu for name, (cpu, _) in result.processes.items() if name in SERVICE_NAMES)
    row("service CPU per workload (ms; the four services)", _fmt(services / workloads * 1000, 3))
    if result.idle_startup_cpu is not None:
        row(
            "  less starting (an idle stack's, measured apart)",
            _fmt((services - result.idle_startup_cpu) / workloads * 1000, 3),
        )
    row(
        "  with nats-server",
        _fmt((services + result.processes.get("nats-server", (0.0, 0.0))[0]) / workloads * 1000, 3),
    )
    row(
        "bus messages per workload (JetStream, every stream)",
        _fmt(sum(result.bus_messages.values()) / workloads, 2),
    )
    for stream, count in sorted(result.bus_messages.items(), key=lambda item: -item[1]):
        row(f"  {stream}", f"{count:,} ({count / workloads:.2f} per workload)")
    row("  per-workload copies kept (BERTH_BUS_COPIES)", copies_kept())
    row(
        "quota over-committed (event log)",
        "no" if result.violations == 0 else f"YES: {result.violations} instants",
        "no",
    )
    row(
        "peak cohort usage / cohort quota (CPU)",
        f"{_fmt(result.peak_cohort_cpu, 0)} / {_fmt(result.cohort_limit_cpu, 0)}",
    )
    row("workloads created / finished", f"{result.workloads:,} / {result.finished:,}")
    row("creation span, first to last create (s)", _fmt(result.creation_span))
    row("startup / stop (s)", f"{_fmt(result.startup, 2)} / {_fmt(result.drain_stop, 2)}")
    if result.idle_startup_cpu is not None:
        row(
            "starting, four services' CPU s (an idle stack to ready)",
            _fmt(result.idle_startup_cpu, 2),
        )
    row(
        "admitted -> started, mean / p99 (ms)",
        _mean_p99_text(result.start_lag),
        "0",
    )
    row(
        "quota held beyond run time, mean / p99 (ms)",
        _mean_p99_text(result.overhold),
        "0",
    )
    row("events in the log", f"{result.events:,}")
    if result.console_messages is not None:
        row("console: overview stream messages read", f"{result.console_messages:,}")
    for kind, count in result.by_type.items():
        row(f"  {kind}", f"{count:,}")
    headers = (
        "metric",
        "Berth",
        "ideal (sim)",
        "ideal (spec)",
        "Kueue mean",
        "Kueue threshold",
        "goal",
    )
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        f"Kueue scheduler benchmark, config {config.name}: {config.total_workloads:,} workloads,"
        f" {config.cohorts * config.cqs_per_cohort:,} ClusterQueues in {config.cohorts} cohorts,"
        f" preemption reclaimWithinCohort {config.reclaim_within_cohort} / withinClusterQueue"
        f" {config.within_cluster_queue}"
        + (", StrictFIFO" if config.strict_fifo else "")
        + (", borrowingYieldsToHigherPriority" if config.borrowing_yields else "")
        + (
            ", waitTargets "
            + " ".join(
                f"{'other' if floor is None else floor}={wait}"
                for floor, wait in config.wait_targets
            )
            if config.wait_targets
            else ""
        )
        + (f"; x{scale:.3g} of the full scenario" if scaled else "")
        + (
            f"; creations capped at {result.creations_per_s:g}/s (a client limit, as Kueue's)"
            if result.creations_per_s is not None
            else ""
        ),
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if result.timeline is not None:
        lines.append(f"timeline: {result.timeline}")
    return "\n".join(lines)


def render_subjects(result: RunResult) -> str:
    """Per subject family: events published per workload and by whom, and per service the
    messages its consumers decoded per workload, with those sent to it only to be dropped
    (``+0.50 dropped``: delivered, framed and called back for, never decoded)."""
    workloads = max(1, result.workloads)
    services = [name for name in SERVICE_NAMES if name in result.reads]
    families = list(result.published)
    families += sorted({s for r in result.reads.values() for s in r} - set(families))
    headers = ("subject", "published/wl", "by", *(f"{name} reads/wl" for name in services))
    rows: list[tuple[str, ...]] = []

    def cell(delivered: int, decoded: int) -> str:
        if delivered == 0:
            return "-"
        text = f"{decoded / workloads:.2f}"
        if delivered > decoded:
            text += f" +{(delivered - decoded) / workloads:.2f} dropped"
        return text

    for family in families:
        published = result.published.get(family, Published())
        rows.append(
            (
                family,
                f"{published.count / workloads:.2f}",
                ",".join(sorted(published.sources)) or "-",
                *(cell(*result.reads[name].get(family, (0, 0))) for name in services),
            )
        )
    totals = [
        (
            sum(d for d, _ in result.reads[name].values()),
            sum(c for _, c in result.reads[name].values()),
        )
        for name in services
    ]
    total_published = sum(p.count for p in result.published.values())
    rows.append(("all", f"{total_published / workloads:.2f}", "", *(cell(*t) for t in totals)))
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "Event stream by subject: published per workload (the event log) and read per workload"
        " by each service's consumers once they caught up (decoded; '+x dropped': sent to it,"
        " dropped undecoded)",
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)
