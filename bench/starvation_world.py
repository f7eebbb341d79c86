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
"""

from __future__ import annotations

import heapq
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.admission.bounds import AgeingBook
from services.admission.model import WorkloadView
from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from services.preemption.cluster import Cluster
from services.preemption.deciding import decide
from services.preemption.protection import HOUR
from services.recovery.ageing import boost_at, reservation_granted
from shared.config import ClusterQueue, ClusterQueuePolicy, ConfigObject, parse_object
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
from shared.starvation import QueueFacts, ageing_clock, queue_facts

__all__ = ["Params", "Report", "simulate"]

V1 = "kueue.x-k8s.io/v1beta1"
SETTLE = 1.0  # as the preemption service: look again this long after victims left
REREAD = 5.0  # the least time between two reads of all the bounds of one queue


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
    looked: bool = False  # its bound was read during the current wait
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
        job.waited_from = self.now
        self.jobs[ref.uid] = job
        self.unaged[ref.uid] = job
        if high:
            self.pending_high[queue] += 1
        pod_sets = [PodSet(name="main", count=1, requests=job.request)]
        self.scheduler.submit(
            QueuedWorkload(ref=ref, local_queue=queue, queue_time=self.now, priority=priority,
                           pod_sets=pod_sets)
        )  # fmt: skip
        self._fold(WorkloadSubmitted(id="", source="watcher", time=self._at(), workload=ref, kind="Job",
                                     queue_name=queue, pod_sets=pod_sets, created=self._at()))  # fmt: skip

    # --- the cluster ----------------------------------------------------------------------

    def _finish(self, job: Job) -> None:
        job.done = True
        self.report.finished += 1
        self.report.useful_cpu_seconds += job.cpus * job.runtime
        self.scheduler.finish(job.ref)
        self.scheduler.delete(job.ref)  # keeps the core small; the service keeps it longer
        self._fold(WorkloadFinished(id="", source="watcher", time=self._at(), workload=job.ref,
                                    generation=job.generation, succeeded=True))  # fmt: skip
        self.jobs.pop(job.ref.uid)
        if self.aged.pop(job.ref.uid, None) is not None:
            self.changed.add(job.queue)
        self._victim_left(job.ref)

    def _stop(self, job: Job) -> None:
        """The victim's pods are gone: its quota is free and it is pending again."""
        job.stopping, job.admitted_at, job.ends_at = False, None, None
        self.scheduler.evict(job.ref)
        self._fold(WorkloadEvicted(id="", source="watcher", time=self._at(), workload=job.ref,
                                   generation=job.generation, reason="Preempted"))  # fmt: skip
        job.waited_from, job.least_bound, job.looked = self.now, None, False
        if job.managed and job.since is None:
            job.since = self.now
            self.unaged.pop(job.ref.uid, None)
            self.aged[job.ref.uid] = job
            self._announce(job)  # recovery announces a new clock at once
        elif job.since is None:
            self.unaged[job.ref.uid] = job
        self._victim_left(job.ref)

    def _victim_left(self, ref: WorkloadRef) -> None:
        released = self.scheduler.left(ref)  # the core ends the nomination after its next pass
        if released is not None:
            self.due[released.uid] = self.now + SETTLE

    # --- recovery: ageing -------------------------------------------------------------------

    def _age(self) -> None:
        assert self.ageing is not None
        for job in list(self.unaged.values()):
            assert job.waited_from is not None
            job.since = ageing_clock(since=None, waiting_since=job.waited_from, now=self.now,
                                     reserve_after=self.reserve_after)  # fmt: skip
            if job.since is not None:
                del self.unaged[job.ref.uid]
                self.aged[job.ref.uid] = job
                self._announce(job)
        # Per queue, every clock in order with the CPUs of those before it (the share rule).
        clocks: dict[str, list[tuple[float, str]]] = defaultdict(list)
        for job in self.aged.values():
            clocks[job.queue].append((job.since or 0.0, job.ref.uid))
        before: dict[str, dict[str, int]] = {}
        for queue, keys in clocks.items():
            keys.sort()
            total, before[queue] = 0, {}
            for _, uid in keys:
                before[queue][uid] = total
                total += self.aged[uid].cpus
        share = self.ageing.max_reserved_share
        for job in self.aged.values():
            if job.admitted_at is not None or job.since is None:
                continue  # only a waiting job ages
            if job.settled and job.reserved:
                continue  # nothing of it changes any more
            if job.settled:  # capped and due: boost_at gives the same from now on
                boost, due = job.boost, True
            else:
                boost, due = boost_at(self.ageing, self.now - job.since)
                job.settled = due and boost == self.ageing.max_boost
            earlier = before[job.queue][job.ref.uid]
            # The share rule's own test first (fits_share on one resource), so that a job
            # that cannot fit yet costs no call: the same answers, a third of the time.
            fits = (earlier + job.cpus) * 1000 <= share * (self.nominal[job.queue] * 1000)
            reserved = due and (job.reserved or (fits and self._granted(job, earlier)))
            if (boost, reserved) != (job.boost, job.reserved):
                job.boost, job.reserved = boost, reserved
                self._announce(job)

    def _announce(self, job: Job) -> None:
        assert job.since is not None
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
        self.unaged.pop(job.ref.uid, None)
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
        them then keeps the check on the later bound shown, which must hold too.)"""
        held: dict[str, int] = defaultdict(int)
        # Read again at most every REREAD seconds per queue (each read is of every waiting
        # workload there): fewer reads check fewer bounds, never a wrong one.
        changed = {q for q in self.changed if self.now - self.reread.get(q, -REREAD) >= REREAD}
        self.changed -= changed
        for queue in changed:
            self.reread[queue] = self.now
        for job in self.aged.values():
            held[job.queue] += job.cpus if job.reserved else 0
        for queue, cpus in held.items():
            if cpus > self.p.share * self.nominal[queue]:
                self.report.over_share.append(f"{queue}: {cpus} of {self.nominal[queue]} reserved")
        waiting = [
            job
            for job in (*self.aged.values(), *self.unaged.values())
            if job.waited_from is not None and job.admitted_at is None
            and (job.queue in changed or not job.looked)
        ]  # fmt: skip
        if not waiting:
            return
        queues = changed | {job.queue for job in waiting}
        views = {
            job.ref.uid: WorkloadView(ref=job.ref, local_queue=job.queue, cluster_queue=job.queue,
                                      priority=job.priority, state="pending",
                                      effective_priority=job.priority + job.boost,
                                      queue_time=job.created)
            for job in (*self.aged.values(), *self.unaged.values())
            if job.admitted_at is None and job.queue in queues
        }
        waits = self.book.waits(views.values())
        for job in waiting:
            job.looked = True
            bound = self.book.bound(views[job.ref.uid], policies=self.policies,
                                    facts=self.facts.get(job.queue), waits=waits)  # fmt: skip
            if bound is not None and bound.at is not None:
                if job.least_bound is None or bound.at < job.least_bound:
                    job.least_bound = bound.at

    # --- the clock ------------------------------------------------------------------------

    def step(self) -> None:
        p = self.p
        self.now = round(self.now + p.tick, 6)
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


def simulate(p: Params, *, max_seconds: float = 10 * 24 * 3600) -> Report:
    """Run until every arrival has ended (or ``max_seconds`` of simulated time)."""
    started = time.perf_counter()
    world = World(p)
    while world.report.arrived < p.jobs or world.jobs:
        world.step()
        if world.now > max_seconds:
            break
    world.report.sim_seconds = world.now
    world.report.seconds = time.perf_counter() - started
    return world.report
