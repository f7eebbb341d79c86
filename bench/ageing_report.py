"""The numbers of ``bench/ageing.py``, from one run's event log: waits of both classes,
thrash, preemptions per admission, useful work, the shown bound against the waits, and what
reservations took from the higher class.

The shown bound is what admission showed: the log replayed through admission's own
``AgeingBook`` (``shared.starvation.runs_by``), after every event, for every managed job that
waits; a wait's bound is the earliest shown during it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from rich.console import Console
from rich.table import Table

from services.admission.bounds import AgeingBook, queues_of
from services.admission.model import WorkloadView
from shared.config import ClusterQueue, ClusterQueuePolicy, ConfigObject, LocalQueue
from shared.events import (
    AnyEvent,
    EvictionRequested,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
    quota_of,
)
from shared.jobs import ManagedJob

__all__ = [
    "THRASH_SECONDS",
    "Analysis",
    "JobStats",
    "Result",
    "analyse",
    "percentile",
    "print_results",
]

THRASH_SECONDS = 1.0  # a readmission preempted again this soon made no real progress
console = Console(highlight=False, width=120)


@dataclass
class JobStats:
    job_id: int
    name: str
    status: str
    preemptions: int = 0
    admissions: int = 0
    waits: list[float] = field(default_factory=list)
    censored: int = 0
    readmissions: int = 0  # admissions after a preemption
    thrashed: int = 0  # admissions whose eviction was requested within THRASH_SECONDS


@dataclass
class Bounds:
    """Managed waits against the bound admission showed for them."""

    waits: int = 0
    bounded: int = 0
    late: int = 0  # admitted after a bound it was shown
    longest: tuple[float, float] = (0.0, 0.0)  # (wait, its bound - its start), longest bounded
    reasons: Counter[str] = field(default_factory=Counter)  # why a wait had no bound


@dataclass
class Analysis:
    jobs: list[JobStats]
    evictions: int  # EvictionRequested, all workloads
    admissions: int  # WorkloadAdmitted, all workloads
    repeated_pairs: int  # (victim, preemptor) pairs seen more than once, extra occurrences
    worst_pair: int  # the most times one pair occurred
    repeated: list[str]  # "victim <- preemptor xN" for each pair seen more than once
    stream_waits: list[float]  # plain jobs: submitted -> first admitted (censored at the end)
    useful: float  # CPU-seconds of runs that finished / CPU-seconds of quota
    bounds: Bounds
    reserved_peak: float  # the largest share of the quota running reservations held


@dataclass
class Result:
    mode: str
    policy: str
    stream_jobs: int
    seconds: float
    drained: bool
    analysis: Analysis

    @property
    def jobs(self) -> list[JobStats]:
        return self.analysis.jobs

    @property
    def waits(self) -> list[float]:
        return sorted(w for j in self.jobs for w in j.waits)


def analyse(
    events: list[AnyEvent],
    records: dict[int, ManagedJob],
    end: datetime,
    *,
    config: list[ConfigObject],
    cpus: int,
) -> Analysis:
    owner: dict[str, int] = {}  # workload uid -> managed job id (every attempt)
    stats: dict[int, JobStats] = {}
    for job_id, record in records.items():
        stats[job_id] = JobStats(job_id, record.name, record.status.value)
        for attempt in record.attempts:
            owner[attempt.uid] = job_id
    evicted_at: dict[int, datetime] = {}  # job id -> when its open wait began
    admitted_at: dict[tuple[str, int], datetime] = {}  # (uid, generation) -> admitted
    readmitted: set[tuple[str, int]] = set()  # admissions that followed a preemption
    submitted_at: dict[str, datetime] = {}  # plain workload uid -> submitted, until admitted
    usage: dict[str, int] = {}  # uid -> milli-CPUs it holds now
    reserved: set[str] = set()
    stream_waits: list[float] = []
    evictions = admissions = 0
    finished_cpu_seconds = reserved_peak = 0.0
    pairs: Counter[tuple[str, str]] = Counter()
    names: dict[str, str] = {}
    for event in events:
        names[event.workload.uid] = event.workload.name
        uid = event.workload.uid
        managed = owner.get(uid)
        if isinstance(event, EvictionRequested):
            evictions += 1
            if event.preemptor is not None:
                pairs[(uid, event.preemptor.uid)] += 1
            if managed is not None and event.reason == "Preempted":
                stats[managed].preemptions += 1
                admitted = admitted_at.get((uid, event.generation))
                if (uid, event.generation) in readmitted and admitted is not None:
                    if (event.time - admitted).total_seconds() < THRASH_SECONDS:
                        stats[managed].thrashed += 1
        elif isinstance(event, WorkloadAdmitted):
            admissions += 1
            admitted_at[(uid, event.generation)] = event.time
            usage[uid] = sum(v for (_, r), v in quota_of(event.assignments).items() if r == "cpu")
            if managed is not None:
                stats[managed].admissions += 1
                began = evicted_at.pop(managed, None)
                if began is not None:
                    stats[managed].waits.append((event.time - began).total_seconds())
                    stats[managed].readmissions += 1
                    readmitted.add((uid, event.generation))
            elif uid in submitted_at:
                began = submitted_at.pop(uid)
                stream_waits.append((event.time - began).total_seconds())
        elif isinstance(event, WorkloadEvicted):
            usage.pop(uid, None)
            if managed is not None:
                evicted_at.setdefault(managed, event.time)
        elif isinstance(event, WorkloadFinished):
            held = usage.pop(uid, 0)
            admitted = admitted_at.get((uid, event.generation))
            if event.succeeded and admitted is not None:
                finished_cpu_seconds += held / 1000 * (event.time - admitted).total_seconds()
        elif isinstance(event, WorkloadSubmitted) and event.workload.name.startswith("high-"):
            submitted_at.setdefault(uid, event.time)
        elif isinstance(event, PriorityBoosted):
            (reserved.add if event.reserved else reserved.discard)(uid)
        held_by_reservations = sum(usage.get(u, 0) for u in reserved)
        reserved_peak = max(reserved_peak, held_by_reservations / (cpus * 1000))
    for job_id, began in evicted_at.items():  # never readmitted: censored at the end
        stats[job_id].waits.append((end - began).total_seconds())
        stats[job_id].censored += 1
    stream_waits.extend((end - began).total_seconds() for began in submitted_at.values())
    span = (end - events[0].time).total_seconds() if events else 0.0
    return Analysis(
        jobs=sorted(stats.values(), key=lambda s: s.job_id),
        evictions=evictions,
        admissions=admissions,
        repeated_pairs=sum(n - 1 for n in pairs.values()),
        worst_pair=max(pairs.values(), default=0),
        repeated=[
            f"{names.get(v, v)} <- {names.get(p, p)} x{n}" for (v, p), n in pairs.items() if n > 1
        ],
        stream_waits=sorted(stream_waits),
        useful=finished_cpu_seconds / max(1.0, cpus * span),
        bounds=shown_bounds(events, set(owner), config),
        reserved_peak=reserved_peak,
    )


def shown_bounds(events: list[AnyEvent], managed: set[str], config: list[ConfigObject]) -> Bounds:
    """Replay the log through admission's ``AgeingBook``; each managed wait's bound is the
    earliest one shown while it lasted, with every pending workload (the stream's too: each
    ages, and one waiting since earlier goes first) as admission lists them."""
    book = AgeingBook()
    policies = [o for o in config if isinstance(o, ClusterQueuePolicy)]
    queues = queues_of(o for o in config if isinstance(o, ClusterQueue))
    local = {(o.metadata.namespace, o.metadata.name): o.spec.cluster_queue
             for o in config if isinstance(o, LocalQueue)}  # fmt: skip
    queue_of: dict[str, str] = {}
    pending: dict[str, str] = {}  # every pending workload -> its ClusterQueue
    waiting: dict[str, tuple[float, float | None, str]] = {}  # uid -> (start, least, reason)
    found = Bounds()
    for event in events:
        book.apply(event)
        uid, at = event.workload.uid, event.time.timestamp()
        match event:
            case WorkloadSubmitted():
                pending[uid] = local.get((event.workload.namespace, event.queue_name), "")
            case WorkloadAdmitted():
                queue_of[uid] = event.cluster_queue
                pending.pop(uid, None)
            case WorkloadEvicted():
                pending[uid] = queue_of.get(uid, "")
            case WorkloadFinished() | WorkloadDeleted():
                pending.pop(uid, None)
        if uid in managed and isinstance(event, WorkloadAdmitted):
            if uid in waiting:
                start, least, reason = waiting.pop(uid)
                found.waits += 1
                if least is None:  # counted by kind: "waits for N workload(s)..."
                    found.reasons[re.sub(r"\d+", "N", reason.split(":")[0])] += 1
                else:
                    found.bounded += 1
                    found.late += at > least
                    found.longest = max(found.longest, (at - start, least - start))
        elif uid in managed and isinstance(event, WorkloadEvicted):
            waiting[uid] = (at, None, "")
        elif uid in managed and isinstance(event, WorkloadFinished | WorkloadEvicted):
            waiting.pop(uid, None)
        views = {other: _pending(other, queue) for other, queue in pending.items()}
        for waiter in waiting:
            views.setdefault(waiter, _pending(waiter, queue_of.get(waiter, "")))
        waits = book.waits(views.values())
        for waiter, (start, least, _) in list(waiting.items()):
            view = views[waiter]
            bound = book.bound(view, policies=policies, facts=queues.get(view.cluster_queue),
                               waits=waits)  # fmt: skip
            if bound is not None and bound.at is not None:
                least = bound.at if least is None else min(least, bound.at)
            waiting[waiter] = (start, least, "" if bound is None else bound.reason)
    return found


def _pending(uid: str, cluster_queue: str) -> WorkloadView:
    return WorkloadView(
        ref=WorkloadRef("", "", uid), local_queue="", cluster_queue=cluster_queue, priority=0,
        effective_priority=0, state="pending", queue_time=0.0,
    )  # fmt: skip


# --- printing ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def _s(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}s"


def spread(values: list[float]) -> str:
    top = max(values) if values else math.nan
    return f"{_s(percentile(values, 50))} / {_s(percentile(values, 90))} / {_s(top)}"


def _rows(result: Result, share: float | None) -> list[tuple[str, str]]:
    found = result.analysis
    jobs = result.jobs
    bounds = found.bounds
    readmissions = sum(j.readmissions for j in jobs)
    thrashed = sum(j.thrashed for j in jobs)
    ran = f"{result.seconds:.1f}s" + ("" if result.drained else " (drain timed out)")
    preempted = sum(1 for j in jobs if j.preemptions)
    succeeded = sum(1 for j in jobs if j.status == "SUCCEEDED")
    if bounds.bounded:
        wait, bound = bounds.longest
        longest = f"{wait:.1f}s vs {bound:.1f}s; {bounds.late} late"
    else:
        longest = "no bound shown"
    unbounded = "; ".join(f"{n}x {r}" for r, n in bounds.reasons.most_common(2)) or "-"
    cap = "" if share is None else f" (cap {share:.0%})"
    return [
        ("run (launch -> every managed job ended)", ran),
        ("managed jobs (preempted / succeeded)", f"{len(jobs)} ({preempted} / {succeeded})"),
        ("low: managed waits, evicted -> readmitted", str(len(result.waits))),
        ("  p50 / p90 / max", spread(result.waits)),
        ("  censored (never readmitted)", str(sum(j.censored for j in jobs))),
        (f"  readmissions preempted again < {THRASH_SECONDS:g}s", f"{thrashed} of {readmissions}"),
        (f"high: stream jobs ({result.stream_jobs}), p50 / p90 / max", spread(found.stream_waits)),
        (
            "preemptions per admission, all workloads",
            f"{found.evictions} / {found.admissions} = "
            f"{found.evictions / max(1, found.admissions):.3f}",
        ),
        ("useful work (finished CPU-s / quota CPU-s)", f"{found.useful:.2f}"),
        ("managed waits with a bound shown", f"{bounds.bounded} of {bounds.waits}"),
        ("  longest bounded wait vs its bound", longest),
        ("  no bound because", unbounded),
        ("price: peak quota share of running reservations", f"{found.reserved_peak:.0%}{cap}"),
        (
            "repeated (victim, preemptor) pairs",
            f"{found.repeated_pairs} (worst pair x{found.worst_pair})"
            + "".join(f"; {pair}" for pair in found.repeated[:2]),
        ),
    ]


def print_results(results: list[Result], *, share: float | None, per_job: bool) -> None:
    """One table, a column per mode; then, with ``per_job``, each managed job."""
    table = Table(title="ageing " + " vs ".join(r.mode for r in results), title_justify="left")
    table.add_column("metric")
    columns = [dict(_rows(r, share if r.mode == "ON" else None)) for r in results]
    for result in results:
        table.add_column(f"ageing {result.mode}", justify="right")
    for label in columns[0]:
        table.add_row(label, *(column[label] for column in columns))
    console.print(table)
    for result in results:
        console.print(f"[dim]ageing {result.mode}: {result.policy}[/]")
    if not per_job:
        return
    for result in results:
        detail = Table(title=f"ageing {result.mode}: per managed job", title_justify="left")
        for column in ("job", "name", "status", "admissions", "preemptions",
                       f"< {THRASH_SECONDS:g}s", "wait p50 / p90 / max", "censored"):  # fmt: skip
            detail.add_column(column, justify="left" if column in ("name", "status") else "right")
        for j in result.jobs:
            detail.add_row(
                str(j.job_id), j.name, j.status, str(j.admissions), str(j.preemptions),
                str(j.thrashed), spread(j.waits), str(j.censored),
            )  # fmt: skip
        console.print(detail)
