"""An adversarial world for the starvation bound, on Berth's real decision cores, no bus.

The pieces that decide are the services' own: admission's ``Scheduler`` and its bound
(``AgeingBook`` -> ``shared.starvation.runs_by``), preemption's folded ``Cluster`` and
``deciding.decide``, recovery's ``boost_at`` and ``reservation_granted``. What is modelled
here is only the glue the services do over the bus (nominations while victims leave, who
preempts when) and the cluster: a workload runs for its runtime from its admission (from
zero again after an eviction), a victim stops at a random moment within the grace period,
and everything is decided on a clock that ticks every ``tick`` seconds (recovery's ageing
every second), as the services decide in batches.

The adversary: ClusterQueues of random sizes, each kept full by waves of high-priority
arrivals (never fewer than ``pressure`` waiting while a wave lasts), plus managed jobs (they
age at once when preempted) and plain low-priority jobs of random priorities, sizes and
runtimes (they age, as every workload does, once a wait lasted reserveAfter:
``shared.starvation.ageing_clock``). Checked while it runs, each a list of violations (empty is
the claim):

- ``late``: a workload (any: high, managed or plain) admitted after a bound shown during that
  wait;
- ``thrash``: a run preempted before its protection ended;
- ``over_budget``: a workload preempted by priority more than maxPreemptionsPerHour in an
  hour;
- ``over_share``: reservations holding more than maxReservedShare of a nominal quota;
- ``repeated``: a preemptor evicting the same workload twice within an hour by priority.

One file of more than 500 lines, for a reason: :class:`World` is one event loop whose steps
(arrivals, ageing, admission, preemption, finishes) read and change the same state on one
clock; split across modules, each part would need all of it.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from bisect import bisect_left, insort
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.admission.bounds import AgeingBook, QueueWaits
from services.admission.model import WorkloadView
from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from services.preemption.cluster import Cluster
from services.preemption.deciding import decide
from services.preemption.protection import HOUR
from services.recovery.ageing import boost_at, reservation_granted
from shared.config import ClusterQueue, ClusterQueuePolicy, ConfigObject, parse_object, policy_for
from shared.events import (
    AnyEvent,
    ContestedResource,
    EvictionRequested,
    PodSet,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.starvation import Earlier, QueueFacts, Waiting, ageing_clock, queue_facts, runs_by

__all__ = ["Params", "Report", "simulate", "why_unbounded"]

V1 = "kueue.x-k8s.io/v1beta1"
SETTLE = 1.0  # as the preemption service: look again this long after victims left
REREAD = 5.0  # the least time between two reads of all the bounds of one queue


def why_unbounded(reason: str) -> str:
    """The kind of reason a wait showed no bound (the last one shown; none: it was admitted in
    the pass its wait began, so it was never shown pending)."""
    if not reason:
        return "admitted in the pass its wait began: never shown pending"
    if reason.startswith("waits for"):
        return "behind earlier-aged workloads that need the share (waits for N...)"
    if reason.startswith("it needs more than the"):
        return "larger than the share reservations may hold (maxReservedShare)"
    if reason.startswith("it needs more"):
        return "larger than its ClusterQueue's nominal quota"
    return reason


@dataclass(frozen=True)
class Params:
    seed: int = 0
    jobs: int = 2_000  # arrivals in all; then the world drains
    queues: int = 3
    nominal: tuple[int, int] = (4, 12)  # CPUs per ClusterQueue
    pressure: int = 2  # high-priority arrivals kept waiting per ClusterQueue
    # The stream comes in waves, on then off (seconds): in the lulls lower priorities get in,
    # so that the next wave preempts them and they age.
    waves: tuple[float, float] = (60.0, 20.0)
    managed: float = 0.3  # share of the other arrivals that are managed jobs
    runtime: tuple[float, float] = (1.0, 40.0)
    reserve_after: float = 20.0
    protect_for: float = 5.0
    minimum_run_time: float = 0.0
    grace: float = 2.0
    per_hour: int = 4
    share: float = 0.5
    tick: float = 0.5
    crosscheck: bool = False  # check the incremental index against admission's own


@dataclass
class Job:
    index: int
    ref: WorkloadRef
    queue: str
    priority: int
    cpus: int
    runtime: float
    managed: bool
    created: float
    generation: int = 0
    admitted_at: float | None = None  # the current run's admission
    ends_at: float | None = None
    stopping: bool = False  # an eviction was requested and it has not stopped yet
    since: float | None = None  # ageing clock
    boost: int = 0
    reserved: bool = False
    waited_from: float | None = None  # the current wait's start (creation or last eviction)
    least_bound: float | None = None  # the earliest bound shown during the current wait
    reason: str = ""  # why the last bound read during the current wait was none
    settled: bool = False  # its boost is capped and its reservation due: neither changes
    done: bool = False

    @property
    def request(self) -> dict[str, int]:
        return {"cpu": self.cpus * 1000}

    @property
    def kind(self) -> str:
        return "high" if self.priority >= 500 else "managed" if self.managed else "plain"


@dataclass
class Report:
    params: Params
    arrived: int = 0
    finished: int = 0
    admissions: int = 0
    preemptions: int = 0  # EvictionRequested, any reason
    reservation_preemptions: int = 0
    aged_waits: int = 0  # every wait: every pending workload ages
    bounded_waits: int = 0
    bounded_by_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Waits without a bound, by why (the last reason shown, or never shown pending).
    unbounded: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    slack: list[float] = field(default_factory=list)  # bound - admission, per bounded wait
    longest_bounded_wait: float = 0.0
    late: list[str] = field(default_factory=list)
    thrash: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    over_share: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    useful_cpu_seconds: float = 0.0
    quota_cpu_seconds: float = 0.0
    sim_seconds: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def violations(self) -> list[str]:
        return self.late + self.thrash + self.over_budget + self.over_share + self.repeated


def _config(p: Params, rng: random.Random) -> tuple[list[ConfigObject], dict[str, int]]:
    nominal = {f"cq{i}": rng.randint(*p.nominal) for i in range(p.queues)}
    docs: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "rf"}},
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "ClusterQueuePolicy",
            "metadata": {"name": "policy"},
            "spec": {
                "minimumRunTime": f"{p.minimum_run_time}s",
                "maxPreemptionsPerHour": p.per_hour,
                "evictionGracePeriod": f"{p.grace}s",
                "ageing": {
                    "priorityPerMinute": 600,
                    # Below the high class (docs/ageing.md): and once capped a boost stops
                    # changing, so a long backlog of aged waits costs nothing per second.
                    "maxBoost": 90,
                    "reserveAfter": f"{p.reserve_after}s",
                    "protectFor": f"{p.protect_for}s",
                    "maxReservedShare": p.share,
                },
            },
        },
    ]
    for name, cpus in nominal.items():
        # Every other queue in a cohort that cannot borrow its quota (lendingLimit 0).
        quota: dict[str, Any] = {"name": "cpu", "nominalQuota": cpus}
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "rf", "resources": [quota]}]}],
        }  # fmt: skip
        if name[-1] in "13579":
            spec["cohort"] = "shared"
            quota["lendingLimit"] = 0
        docs.append({"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name},
                     "spec": spec})  # fmt: skip
        docs.append({"apiVersion": V1, "kind": "LocalQueue",
                     "metadata": {"name": name, "namespace": "ns"},
                     "spec": {"clusterQueue": name}})  # fmt: skip
    return [parse_object(d) for d in docs], nominal


class World:
    def __init__(self, p: Params) -> None:
        self.p = p
        self.rng = random.Random(p.seed)
        objects, self.nominal = _config(p, self.rng)
        self.policies = [o for o in objects if isinstance(o, ClusterQueuePolicy)]
        self.ageing = self.policies[0].spec.ageing
        assert self.ageing is not None
        self.scheduler = Scheduler()
        self.scheduler.set_config(objects)
        self.cluster = Cluster()
        self.cluster.set_config(objects)
        self.book = AgeingBook()
        self.facts: dict[str, QueueFacts] = {
            o.metadata.name: queue_facts(o) for o in objects if isinstance(o, ClusterQueue)
        }
        self.jobs: dict[str, Job] = {}
        self.aged: dict[str, Job] = {}  # jobs with an ageing clock, until they end
        self.unaged: dict[str, Job] = {}  # waiting jobs without a clock yet
        self.reserve_after = p.reserve_after
        self.pending_high: dict[str, int] = defaultdict(int)
        self.stops: list[tuple[float, str, int]] = []  # (when, uid, generation)
        self.ends: list[tuple[float, str, int]] = []
        self.due: dict[str, float] = {}
        self.priority_preemptions: dict[str, list[float]] = defaultdict(list)
        self.pairs: dict[tuple[str, str], float] = {}  # (victim, preemptor) -> last eviction
        self.changed: set[str] = set()  # queues whose bounds may have moved since the last look
        self.reread: dict[str, float] = {}  # queue -> when its bounds were last read again
        # Kept as things happen, so that no tick scans the backlog:
        # per queue, the bound's order (every clock, and every wait without one yet by its
        # start) and the aged ones alone (the share rule's order), as sorted (clock, uid);
        self.order: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.clocks: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.ageing_due: list[tuple[float, str]] = []  # (when recovery looks at it, uid)
        self.ungranted: dict[str, set[str]] = defaultdict(set)  # due, waiting, not reserved
        self.regrant: set[str] = set()  # queues where a grant may have become possible
        self.held: dict[str, int] = defaultdict(int)  # CPUs reserved per queue
        self.fresh: set[str] = set()  # waits whose bound was not read yet
        # Aged jobs that ended, per queue by clock, as admission's book keeps them (until
        # they ended no later than the oldest clock still alive), and by end to forget them.
        self.ended_keys: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.ended: dict[str, list[Earlier]] = defaultdict(list)
        self.ends_of_aged: list[tuple[float, float, str, str]] = []  # (end, clock, uid, queue)
        self.active = True  # something happened during this tick
        self.report = Report(p)
        self.now = 0.0
        self._stamp = (-1.0, datetime.fromtimestamp(0, UTC))

    # --- events into every fold -----------------------------------------------------------

    def _at(self) -> datetime:
        # Events carry no id (nothing here deduplicates by id) and one time per tick: a uuid
        # and a datetime per event were a fifth of the simulation's time.
        if self._stamp[0] != self.now:
            self._stamp = (self.now, datetime.fromtimestamp(self.now, UTC))
        return self._stamp[1]

    def _fold(self, event: AnyEvent) -> None:
        self.cluster.apply(event)
        self.book.apply(event)

    # --- arrivals -------------------------------------------------------------------------

    def _arrive(self, queue: str, *, high: bool) -> None:
        p, rng = self.p, self.rng
        index = self.report.arrived
        self.report.arrived += 1
        managed = not high and rng.random() < p.managed
        if high:
            priority, cpus = (
                rng.randint(500, 1000),
                rng.randint(1, max(1, self.nominal[queue] // 2)),
            )
        else:
            priority, cpus = rng.randint(0, 400), rng.randint(1, self.nominal[queue])
        ref = WorkloadRef("ns", f"w{index}", f"u{index:07d}")
        job = Job(index, ref, queue, priority, cpus, rng.uniform(*p.runtime), managed, self.now)
        self.jobs[ref.uid] = job
        self._wait_begins(job)
        if high:
            self.pending_high[queue] += 1
        pod_sets = [PodSet(name="main", count=1, requests=job.request)]
        self.scheduler.submit(
            QueuedWorkload(ref=ref, local_queue=queue, queue_time=self.now, priority=priority,
                           pod_sets=pod_sets)
        )  # fmt: skip
        self._fold(WorkloadSubmitted(id="", source="watcher", time=self._at(), workload=ref, kind="Job",
                                     queue_name=queue, pod_sets=pod_sets, created=self._at()))  # fmt: skip

    def _wait_begins(self, job: Job) -> None:
        """Its creation or its eviction: a wait without a clock joins the bound's order by
        its start and is looked at by recovery once it has lasted reserveAfter; an aged one
        is looked at on recovery's next tick (only a waiting job ages)."""
        self.active = True
        uid = job.ref.uid
        job.waited_from, job.least_bound, job.reason = self.now, None, ""
        self.fresh.add(uid)
        if job.since is None:
            self.unaged[uid] = job
            insort(self.order[job.queue], (self.now, uid))
            heapq.heappush(self.ageing_due, (self.now + self.reserve_after, uid))
        else:
            heapq.heappush(self.ageing_due, (self.now, uid))

    def _aged(self, job: Job) -> None:
        """It got its clock: it goes in the share rule's order, and the bound's by it."""
        assert job.since is not None
        uid = job.ref.uid
        if self.unaged.pop(uid, None) is not None:
            self.order[job.queue].remove((job.waited_from or 0.0, uid))
        self.aged[uid] = job
        insort(self.order[job.queue], (job.since, uid))
        insort(self.clocks[job.queue], (job.since, uid))

    def _aged_ended(self, job: Job, key: tuple[float, str]) -> None:
        """Keep an aged job that ended as admission's book does (``AgeingBook``: it matters
        to later clocks until it ended no later than the oldest clock still alive)."""
        at = bisect_left(self.ended_keys[job.queue], key)
        self.ended_keys[job.queue].insert(at, key)
        self.ended[job.queue].insert(at, Earlier(job.request, self.now))
        heapq.heappush(self.ends_of_aged, (self.now, *key, job.queue))
        oldest = min((keys[0][0] for keys in self.clocks.values() if keys), default=math.inf)
        while self.ends_of_aged and self.ends_of_aged[0][0] <= oldest:
            _, clock, uid, queue = heapq.heappop(self.ends_of_aged)
            at = bisect_left(self.ended_keys[queue], (clock, uid))
            del self.ended_keys[queue][at], self.ended[queue][at]

    # --- the cluster ----------------------------------------------------------------------

    def _finish(self, job: Job) -> None:
        self.active = True
        job.done = True
        self.report.finished += 1
        self.report.useful_cpu_seconds += job.cpus * job.runtime
        self.scheduler.finish(job.ref)
        self.scheduler.delete(job.ref)  # keeps the core small; the service keeps it longer
        self._fold(WorkloadFinished(id="", source="watcher", time=self._at(), workload=job.ref,
                                    generation=job.generation, succeeded=True))  # fmt: skip
        self.jobs.pop(job.ref.uid)
        if self.aged.pop(job.ref.uid, None) is not None:
            assert job.since is not None
            key = (job.since, job.ref.uid)
            for keys in (self.order[job.queue], self.clocks[job.queue]):
                del keys[bisect_left(keys, key)]
            self.changed.add(job.queue)
            self.regrant.add(job.queue)  # room in the share for a later clock
            self.held[job.queue] -= job.cpus if job.reserved else 0
            self._aged_ended(job, key)
        self._victim_left(job.ref)

    def _stop(self, job: Job) -> None:
        """The victim's pods are gone: its quota is free and it is pending again."""
        self.active = True
        job.stopping, job.admitted_at, job.ends_at = False, None, None
        self.scheduler.evict(job.ref)
        self._fold(WorkloadEvicted(id="", source="watcher", time=self._at(), workload=job.ref,
                                   generation=job.generation, reason="Preempted"))  # fmt: skip
        if job.managed and job.since is None:
            job.since = self.now
            self._aged(job)
            self._announce(job)  # recovery announces a new clock at once
        self._wait_begins(job)
        self._victim_left(job.ref)

    def _victim_left(self, ref: WorkloadRef) -> None:
        released = self.scheduler.left(ref)  # the core ends the nomination after its next pass
        if released is not None:
            self.due[released.uid] = self.now + SETTLE

    # --- recovery: ageing -------------------------------------------------------------------

    def _age(self) -> None:
        """Recovery's tick, incremental: only the jobs whose clock, boost or reservation can
        change now are looked at (those due by ``ageing_due``, and the grants of queues whose
        share may have room), with recovery's own ``ageing_clock``, ``boost_at`` and
        ``reservation_granted``; the same answers as looking at every job each second."""
        assert self.ageing is not None
        ageing, now = self.ageing, self.now
        looked: dict[str, Job] = {}
        while self.ageing_due and self.ageing_due[0][0] <= now:
            _, uid = heapq.heappop(self.ageing_due)
            job = self.jobs.get(uid)
            if job is not None and job.admitted_at is None and job.waited_from is not None:
                looked[uid] = job
        boosts: dict[str, int] = {}
        for uid, job in sorted(looked.items()):
            if job.since is None:
                assert job.waited_from is not None
                job.since = ageing_clock(since=None, waiting_since=job.waited_from, now=now,
                                         reserve_after=self.reserve_after)  # fmt: skip
                if job.since is None:
                    continue  # the entry of an earlier wait
                self._aged(job)
                self._announce(job)
            due = job.settled  # capped and due: boost_at gives the same from now on
            if not job.settled:
                boost, due = boost_at(ageing, now - job.since)
                job.settled = due and boost == ageing.max_boost
                boosts[uid] = boost
            if not job.settled:  # the boost changes each second until capped, then it is due
                capped = boost == ageing.max_boost
                again = math.ceil(job.since + self.reserve_after) if capped else now + 1
                heapq.heappush(self.ageing_due, (max(now + 1, again), uid))
            if due and not job.reserved:
                self.ungranted[job.queue].add(uid)
                self.regrant.add(job.queue)
        granted = self._grant()
        for uid in sorted(boosts.keys() | granted):
            job = self.jobs[uid]
            boost = boosts.get(uid, job.boost)
            reserved = job.reserved or uid in granted
            if (boost, reserved) != (job.boost, job.reserved):
                job.boost, job.reserved = boost, reserved
                self._announce(job)

    def _grant(self) -> set[str]:
        """The due waiting jobs that get their reservation now, by recovery's rule
        (``reservation_granted``, with the CPUs of the earlier clocks summed). In a queue,
        clocks go in order; once the clocks so far exceed the share, no later one fits (its
        earlier clocks include them all), so the walk stops there."""
        granted: set[str] = set()
        share = self.ageing.max_reserved_share if self.ageing is not None else 0.0
        for queue in sorted(self.regrant):
            limit = share * (self.nominal[queue] * 1000)
            earlier, due = 0, self.ungranted[queue]
            for _, uid in self.clocks[queue]:
                job = self.jobs[uid]
                if uid in due and job.admitted_at is None:
                    fits = (earlier + job.cpus) * 1000 <= limit
                    if fits and self._granted(job, earlier):
                        granted.add(uid)
                        due.discard(uid)
                        self.held[queue] += job.cpus
                        if self.held[queue] > self.p.share * self.nominal[queue]:
                            self.report.over_share.append(
                                f"{queue}: {self.held[queue]} of {self.nominal[queue]} reserved"
                            )
                earlier += job.cpus
                if earlier * 1000 > limit:
                    break
        self.regrant.clear()
        return granted

    def _announce(self, job: Job) -> None:
        assert job.since is not None
        self.active = True
        event = PriorityBoosted(id="", source="recovery", time=self._at(), workload=job.ref,
                                boost=job.boost, reserved=job.reserved,
                                since=datetime.fromtimestamp(job.since, UTC))  # fmt: skip
        self.scheduler.set_boost(job.ref, job.boost, reserved=job.reserved, since=job.since)
        self._fold(event)

    def _granted(self, job: Job, earlier_cpus: int) -> bool:
        """Recovery's rule, with the CPUs of the earlier clocks of its queue summed."""
        assert self.ageing is not None
        nominal = {"cpu": self.nominal[job.queue] * 1000}
        return reservation_granted(self.ageing, request=job.request, nominal=nominal,
                                   earlier=[{"cpu": earlier_cpus * 1000}])  # fmt: skip

    # --- admission ------------------------------------------------------------------------

    def _admit(self) -> None:
        for decision in self.scheduler.schedule():
            self.active = True
            job = self.jobs[decision.ref.uid]
            if isinstance(decision, Admission):
                self._admitted(job, decision)
                continue
            priority = self.scheduler.effective_priority(job.ref) - job.boost  # boost can't preempt
            self.cluster.apply(WorkloadPending(
                id="", source="admission", time=self._at(), workload=job.ref, cluster_queue=job.queue,
                reason=decision.reason, message=decision.message, priority=priority,
                preemption_may_help=decision.preemption_may_help,
                contested=[ContestedResource(f, r, a) for f, r, a in decision.contested],
            ))  # fmt: skip
            if decision.preemption_may_help:
                self.due[job.ref.uid] = self.now

    def _admitted(self, job: Job, decision: Admission) -> None:
        job.generation += 1
        job.admitted_at, job.ends_at = self.now, self.now + job.runtime
        self.active = True
        uid = job.ref.uid
        if self.unaged.pop(uid, None) is not None:
            assert job.waited_from is not None
            del self.order[job.queue][bisect_left(self.order[job.queue], (job.waited_from, uid))]
        self.fresh.discard(uid)
        self.ungranted[job.queue].discard(uid)
        heapq.heappush(self.ends, (job.ends_at, job.ref.uid, job.generation))
        self.report.admissions += 1
        if job.priority >= 500 and job.generation == 1:
            self.pending_high[job.queue] -= 1
        self.report.waits["high" if job.priority >= 500 else "low"].append(self.now - job.created)
        if job.waited_from is not None:
            self._check_wait(job)
        self._fold(WorkloadAdmitted(
            id="", source="admission", time=self._at(), workload=job.ref, cluster_queue=job.queue,
            local_queue=job.queue, priority=self.scheduler.effective_priority(job.ref),
            assignments=decision.assignments, generation=job.generation,
        ))  # fmt: skip

    def _check_wait(self, job: Job) -> None:
        assert job.waited_from is not None
        report = self.report
        report.aged_waits += 1
        if job.least_bound is not None:
            report.bounded_waits += 1
            report.bounded_by_kind[job.kind] += 1
            report.slack.append(job.least_bound - self.now)
            report.longest_bounded_wait = max(report.longest_bounded_wait,
                                              self.now - job.waited_from)  # fmt: skip
            if self.now > job.least_bound:
                report.late.append(f"{job.ref.name} in {job.queue}: admitted at {self.now:.1f},"
                                   f" bound {job.least_bound:.0f}")  # fmt: skip
        else:
            report.unbounded[why_unbounded(job.reason)] += 1
        job.waited_from, job.least_bound = None, None

    # --- preemption -----------------------------------------------------------------------

    def _preempt(self) -> None:
        for queue in self.facts:
            first = self.cluster.first_reservation(queue)
            if first is not None and first in self.cluster.waiting:
                self.due[first] = self.now
        for uid in sorted(u for u, when in self.due.items() if when <= self.now):
            del self.due[uid]
            decision = decide(self.cluster, uid, self.now)
            if decision.retry_at is not None:
                self.due[uid] = decision.retry_at
            preemptor = self.jobs[uid].ref if uid in self.jobs else None
            for victim in decision.victims:
                job = self.jobs[victim.workload.ref.uid]
                self._request_eviction(job, preemptor, reservation=decision.reservation)

    def _request_eviction(
        self, job: Job, preemptor: WorkloadRef | None, *, reservation: bool
    ) -> None:
        p, report = self.p, self.report
        assert job.admitted_at is not None
        ran = self.now - job.admitted_at
        protection = (
            max(p.minimum_run_time, p.protect_for) if job.since is not None else p.minimum_run_time
        )
        if ran < protection - 1e-9:
            report.thrash.append(f"{job.ref.name}: preempted after {ran:.2f}s (< {protection}s)")
        if not reservation and preemptor is not None:
            pair = (job.ref.uid, preemptor.uid)
            if self.now - self.pairs.get(pair, -HOUR) < HOUR:
                report.repeated.append(f"{job.ref.name} evicted twice by {preemptor.name}")
            self.pairs[pair] = self.now
        if not reservation:
            window = [t for t in self.priority_preemptions[job.ref.uid] if t > self.now - HOUR]
            window.append(self.now)
            self.priority_preemptions[job.ref.uid] = window
            if len(window) > p.per_hour:
                report.over_budget.append(f"{job.ref.name}: {len(window)} in an hour")
        else:
            report.reservation_preemptions += 1
        report.preemptions += 1
        self.active = True
        event = EvictionRequested(id="", source="preemption", time=self._at(), workload=job.ref,
                                  cluster_queue=job.queue, generation=job.generation,
                                  reason="Preempted", preemptor=preemptor)  # fmt: skip
        self.cluster.apply(event)
        self.scheduler.eviction_requested(job.ref, job.generation, preemptor)
        job.stopping = True
        # Half of the victims take the whole grace period: the worst case the bound allows.
        stop = self.now + (p.grace if self.rng.random() < 0.5 else self.rng.uniform(0, p.grace))
        heapq.heappush(self.stops, (stop, job.ref.uid, job.generation))

    # --- the bound, as shown ----------------------------------------------------------------

    def _look(self) -> None:
        """Read the bounds admission would show now: of each wait when it begins, and again
        of every wait of a ClusterQueue where an aged workload ended (or with the policy,
        fixed here): only then can one move earlier. A wait that begins goes after every
        other (its clock, or clock-to-be, is the latest), and a clock set on a wait under way
        is the clock-to-be it was counted with, so neither moves another's bound. (A waiting
        workload ahead admitted before it ages only makes later bounds earlier: not reading
        them then keeps the check on the later bound shown, which must hold too.)

        Only the head of a queue's order can have a bound: once the workloads ahead of one
        (``Earlier`` with no end yet) exceed the share, ``runs_by`` has none for it or any
        later one ("waits for N workload(s)..."). So admission's book is asked for the head;
        a new wait behind it is given ``runs_by``'s answer from the sum ahead of it (the
        same reason), and the rest of the backlog is not read again."""
        # Read again at most every REREAD seconds per queue: fewer reads check fewer
        # bounds, never a wrong one.
        changed = {q for q in self.changed if self.now - self.reread.get(q, -REREAD) >= REREAD}
        self.changed -= changed
        for queue in changed:
            self.reread[queue] = self.now
        fresh, self.fresh = self.fresh, set()
        queues = changed | {self.jobs[uid].queue for uid in fresh}
        views: dict[str, WorkloadView] = {}
        reads: list[Job] = []
        waits: dict[str, QueueWaits] = {}
        for queue in sorted(queues):
            limit = self.p.share * self.nominal[queue]
            ahead, count, head = 0, 0, set()
            totals: list[dict[str, int]] = [{}]
            for key in self.order[queue]:
                if ahead > limit:
                    break
                job = self.jobs[key[1]]
                if job.admitted_at is None:
                    head.add(job.ref.uid)
                    views[job.ref.uid] = self._view(job)
                    if queue in changed or job.ref.uid in fresh:
                        reads.append(job)
                ahead, count = ahead + job.cpus, count + 1
                totals.append({"cpu": ahead * 1000})
            # Admission's index of the queue (AgeingBook.waits), for its head: what goes
            # before each of those is all there (the rest comes after).
            waits[queue] = QueueWaits(self.order[queue][:count], totals, self.ended_keys[queue],
                                      self.ended[queue])  # fmt: skip
            for uid in sorted(u for u in fresh if self.jobs[u].queue == queue and u not in head):
                job = self.jobs[uid]
                assert job.waited_from is not None
                waiting = Waiting(
                    queue=self.facts[queue], request=job.request, since=job.since,
                    waiting_since=job.waited_from,
                    earlier=[Earlier({"cpu": ahead * 1000}, None, count)],
                )  # fmt: skip
                none = runs_by(policy_for(self.policies, queue), waiting)
                assert none.at is None, (job.ref.name, none)
                job.reason = none.reason
        if not reads:
            return
        if self.p.crosscheck:  # the book's own index gives the same
            book = self.book.waits(views.values())
            for job in reads:
                clock = (job.since if job.since is not None else job.waited_from or 0.0,
                         job.ref.uid)  # fmt: skip
                mine, theirs = waits[job.queue].before(clock), book[job.queue].before(clock)
                assert mine == theirs, (job.ref.name, mine, theirs)
        for job in reads:
            bound = self.book.bound(views[job.ref.uid], policies=self.policies,
                                    facts=self.facts.get(job.queue), waits=waits)  # fmt: skip
            if bound is None:
                continue
            if bound.at is None:
                job.reason = bound.reason
            elif job.least_bound is None or bound.at < job.least_bound:
                job.least_bound = bound.at

    def _view(self, job: Job) -> WorkloadView:
        return WorkloadView(ref=job.ref, local_queue=job.queue, cluster_queue=job.queue,
                            priority=job.priority, state="pending",
                            effective_priority=job.priority + job.boost,
                            queue_time=job.created)  # fmt: skip

    # --- the clock ------------------------------------------------------------------------

    def step(self) -> None:
        p = self.p
        self.now = round(self.now + p.tick, 6)
        self.active = False
        while self.ends and self.ends[0][0] <= self.now:
            _, uid, generation = heapq.heappop(self.ends)
            job = self.jobs.get(uid)
            if job is not None and job.generation == generation and job.admitted_at is not None:
                self._finish(job)
        while self.stops and self.stops[0][0] <= self.now:
            _, uid, generation = heapq.heappop(self.stops)
            job = self.jobs.get(uid)
            if job is not None and job.generation == generation and job.stopping:
                self._stop(job)
        if self.report.arrived < p.jobs:
            on, off = p.waves
            wave = self.now % (on + off) < on
            for queue in self.nominal:
                while (
                    wave and self.pending_high[queue] < p.pressure and self.report.arrived < p.jobs
                ):
                    self._arrive(queue, high=True)
                if self.rng.random() < p.tick / 2:
                    self._arrive(queue, high=False)
        if abs(self.now - round(self.now)) < 1e-9:
            self._age()  # recovery's tick: every second
        self._admit()
        self._preempt()
        self._look()
        self.report.quota_cpu_seconds += p.tick * sum(self.nominal.values())
        if not self.active and self.report.arrived >= p.jobs:
            self._skip()

    def _skip(self) -> None:
        """After a tick in which nothing happened (no arrival, end, stop, clock, boost,
        decision or eviction), nothing happens before the next timed thing: a run's end, a
        victim's stop, a preemptor's retry, recovery's next look at a job, a queue's next
        read of its bounds. Jump to the tick before it (arrivals draw a number every tick:
        only once they are over)."""
        p = self.p
        times = [when for when in self.due.values()]
        times += [heap[0][0] for heap in (self.ends, self.stops) if heap]
        if self.ageing_due:
            times.append(float(math.ceil(self.ageing_due[0][0])))  # recovery ticks each second
        times += [self.reread.get(q, -REREAD) + REREAD for q in self.changed]
        if not times:
            return
        ticks = math.ceil(round((min(times) - self.now) / p.tick, 6)) - 1
        if ticks > 0:
            self.now = round(self.now + ticks * p.tick, 6)
            self.report.quota_cpu_seconds += ticks * p.tick * sum(self.nominal.values())


def simulate(p: Params, *, max_seconds: float = 10 * 24 * 3600) -> Report:
    """Run until every arrival has ended (or ``max_seconds`` of simulated time)."""
    started, cpu = time.perf_counter(), time.process_time()
    world = World(p)
    while world.report.arrived < p.jobs or world.jobs:
        world.step()
        if world.now > max_seconds:
            break
    world.report.sim_seconds = world.now
    world.report.seconds = time.perf_counter() - started
    world.report.cpu_seconds = time.process_time() - cpu
    return world.report
