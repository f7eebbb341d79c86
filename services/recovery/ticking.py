"""Recovery's ageing tick: every second, each waiting workload's boost and reservation.

Each waiting preempted managed job and every other workload with an ageing clock
(``waiting.Waits.ageing``) gets its boost and whether it holds a reservation now
(``ageing.boost_at``, ``ageing.reservation_granted``); what changed since it was last
announced is announced (``PriorityBoosted``). The service publishes what ``ageing_tick``
returns and stores the jobs it changed (``RecoveryService._publish_boosts``). No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.recovery import metrics
from services.recovery.ageing import boost_at, reservation_granted, reserve_after_seconds
from services.recovery.reserving import Reservations
from services.recovery.waiting import Aged, Waits, earlier_totals, least_reserve_after
from shared.config import AgeingPolicy, ClusterQueue, ClusterQueuePolicy, ageing_for
from shared.events import (
    AnyEvent,
    Event,
    PriorityBoosted,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadRef,
)
from shared.jobs import JobStatus, ManagedJob
from shared.logging import get_logger
from shared.starvation import queue_facts

__all__ = ["Announced", "Tick", "ageing_tick", "announce", "forget_announced"]

log = get_logger("recovery")

# attempt uid -> (boost, reserved) last announced
Announced = dict[str, tuple[int, bool]]


@dataclass
class Tick:
    """What the ageing tick looks up per ClusterQueue: its ageing policy, its
    ``reserveAfter`` in seconds and its nominal quota, each looked up once and then kept
    across ticks until the config changes. The config mirror sets ``changed`` on every
    change it follows (``ConfigMirror._on_change``); ``RecoveryService._tick_lookups`` takes
    it and builds a new ``Tick`` from the config as it then is."""

    policies: list[ClusterQueuePolicy]
    queues: dict[str, ClusterQueue]
    _ageings: dict[str, AgeingPolicy] = field(default_factory=dict)
    _afters: dict[str, float | None] = field(default_factory=dict)
    _nominals: dict[str, Mapping[str, int]] = field(default_factory=dict)

    def ageing(self, cluster_queue: str) -> AgeingPolicy:
        found = self._ageings.get(cluster_queue)
        if found is None:
            found = self._ageings[cluster_queue] = ageing_for(self.policies, cluster_queue)
        return found

    def reserve_after(self, cluster_queue: str) -> float | None:
        if cluster_queue not in self._afters:
            after = self.ageing(cluster_queue).reserve_after
            self._afters[cluster_queue] = None if after is None else reserve_after_seconds(after)
        return self._afters[cluster_queue]

    def nominal(self, cluster_queue: ClusterQueue) -> Mapping[str, int]:
        name = cluster_queue.metadata.name
        if name not in self._nominals:
            self._nominals[name] = queue_facts(cluster_queue).nominal
        return self._nominals[name]


def ageing_tick(
    now: float,
    *,
    tick: Tick,
    waits: Waits,
    jobs: Iterable[ManagedJob],
    reservations: Reservations,
    announced: Announced,
) -> tuple[list[Event], list[ManagedJob]]:
    """The announcements due at ``now`` and the managed jobs whose boost changed (to store).
    Sets the boost and reservation of the jobs and waits it announces, and ``announced``."""
    least = least_reserve_after(tick.policies)
    plain = {w.ref.uid: w for w in waits.ageing(now, tick.reserve_after, least=least)}
    managed: dict[str, tuple[ManagedJob, float, str]] = {}  # uid -> (job, clock, its cq)
    for job in jobs:
        attempt = job.current
        if attempt is None or job.done:
            continue
        wait = plain.get(attempt.uid)
        plain_clock = None if wait is None else wait.since
        clocks = [c for c in (job.first_preempted_at, plain_clock) if c is not None]
        if clocks:
            queue = job.cluster_queue or (wait.cluster_queue if wait else "")
            managed[attempt.uid] = (job, min(clocks), queue)
    # Every clock, managed or not, for the share rule (reservations go earliest first).
    aged = [
        Aged((clock, uid), queue, reservations.request(job))
        for uid, (job, clock, queue) in managed.items()
    ]
    aged += [
        Aged((wait.since, uid), wait.cluster_queue, wait.request)
        for uid, wait in plain.items()
        if uid not in managed and wait.since is not None
    ]
    requests = {a.clock[1]: a.request for a in aged}
    before = earlier_totals(aged)

    def granted(policy: AgeingPolicy, clock: float, uid: str, queue: str) -> bool:
        cluster_queue = tick.queues.get(queue)
        if cluster_queue is None:
            return False
        nominal = tick.nominal(cluster_queue)
        return reservation_granted(
            policy, request=requests[uid], nominal=nominal, earlier=[before[uid]]
        )

    outgoing: list[Event] = []
    changed: list[ManagedJob] = []
    for uid, (job, clock, queue) in managed.items():
        wait = waits.waits.get(uid)
        if job.status != JobStatus.RECOVERING and (wait is None or wait.running):
            continue  # only a waiting job ages; a running one keeps what it had
        policy = tick.ageing(queue)
        boost, due = boost_at(policy, now - clock)
        # A reservation once granted is kept: the jobs it was counted with only leave.
        reserved = due and (job.reserved or granted(policy, clock, uid, queue))
        assert job.current is not None
        ref = WorkloadRef(job.namespace, job.current.name, uid)
        event = announce(announced, ref, clock, (boost, reserved), policy)
        if event is None:
            continue
        if (boost, reserved) != (job.boost, job.reserved):
            job.boost, job.reserved = boost, reserved
            metrics.boosted(cluster_queue=queue, reserved=reserved)
            changed.append(job)
        outgoing.append(event)
        why = _why(now - clock, due=due, reserved=reserved)
        log.info("job_boosted", job=job.id, workload=ref.key, queue=queue, boost=boost,
                 reserved=reserved, reason=why)  # fmt: skip
    for uid, wait in plain.items():
        if uid in managed or wait.running or wait.since is None:
            continue
        policy = tick.ageing(wait.cluster_queue)
        boost, due = boost_at(policy, now - wait.since)
        queue = wait.cluster_queue
        reserved = due and (wait.reserved or granted(policy, wait.since, uid, queue))
        event = announce(announced, wait.ref, wait.since, (boost, reserved), policy)
        if event is None:
            continue
        wait.boost, wait.reserved = boost, reserved
        outgoing.append(event)
        why = _why(now - wait.since, due=due, reserved=reserved)
        log.info("workload_boosted", workload=wait.ref.key, queue=queue, boost=boost,
                 reserved=reserved, reason=why)  # fmt: skip
    return outgoing, changed


def announce(
    announced: Announced,
    ref: WorkloadRef,
    clock: float,
    ageing: tuple[int, bool],
    policy: AgeingPolicy,
) -> PriorityBoosted | None:
    """The boost to publish, or None if this one was announced already. Announced once
    per workload even at boost 0: admission and preemption learn the clock from it."""
    if announced.get(ref.uid) == ageing:
        return None
    announced[ref.uid] = ageing
    boost, reserved = ageing
    return PriorityBoosted(
        id=f"boost-{ref.uid}-{boost}-{int(reserved)}",
        source="recovery",
        workload=ref,
        boost=boost,
        reserved=reserved,
        can_preempt=policy.boost_can_preempt,
        since=datetime.fromtimestamp(clock, UTC),
    )


def _why(waited: float, *, due: bool, reserved: bool) -> str:
    held = "; its reservation waits for share" if due and not reserved else ""
    return f"waited {waited:.0f}s since its ageing clock{held}"


def forget_announced(announced: Announced, events: Iterable[AnyEvent]) -> None:
    """Forget what was announced for the workloads these events end (finished or deleted):
    an ended wait ages no more, and a job's next attempt is another workload. Else every
    workload ever boosted stayed in ``announced`` for the replica's life."""
    for event in events:
        if type(event) is WorkloadFinished or type(event) is WorkloadDeleted:
            announced.pop(event.workload.uid, None)
