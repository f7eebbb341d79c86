"""What the preemption service knows: the fold of the config and the event stream.

Running workloads with their usage and priority, the quota tree with that usage and the room
held by the preemptions in flight (services/preemption/holds.py), the pending workloads that
asked for room, and the evictions in flight (victim -> preemptor). Pure: no I/O; the service
feeds it events and asks it questions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from services.preemption.borrowing import BorrowingTree, cohort_members
from services.preemption.holds import Hold, Holds, held_room
from services.preemption.protection import HOUR, Protection, protected_until, recent
from services.preemption.victims import Preemptor, Running
from shared.config import (
    AgeingPolicy,
    ClusterQueue,
    ClusterQueuePolicy,
    Cohort,
    ConfigObject,
    Configuration,
    policy_for,
)
from shared.durations import parse_duration
from shared.events import (
    AnyEvent,
    EvictionRequested,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
    quota_of,
)
from shared.quota import FlavorResource, QuotaTree

__all__ = ["Cluster", "InFlight", "needs_of"]


@dataclass
class InFlight:
    """Evictions ordered for one preemptor that have not completed yet."""

    preemptor: Preemptor | None  # None if its pending event predates a restart's replay
    victims: set[str] = field(default_factory=set)  # uids


class Cluster:
    def __init__(self) -> None:
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: list[Cohort] = []
        self.policies: list[ClusterQueuePolicy] = []
        self.configuration: Configuration | None = None
        self.tree: QuotaTree = BorrowingTree.build([], [])
        self.running: dict[str, Running] = {}  # uid -> admitted workload
        self.generations: dict[str, int] = {}  # uid -> generation of its current admission
        self.queue_times: dict[str, float] = {}  # uid -> creation time
        self.waiting: dict[str, WorkloadPending] = {}  # preemptors that asked for room
        self.in_flight: dict[str, InFlight] = {}  # preemptor uid -> its evictions
        self.victim_of: dict[str, str] = {}  # victim uid -> preemptor uid
        self.holds = Holds()  # the room each flight holds in ``tree`` (applied incrementally)
        # ClusterQueue -> uid -> admitted workload: a victim search looks at its cohort's
        # queues only, not at every running workload of every cohort.
        self.running_in: dict[str, dict[str, Running]] = {}
        # Managed jobs holding an ageing reservation: once admitted they are not victims (but
        # of a reservation with an earlier clock), or a job that waited past reserveAfter
        # would ping-pong with every new preemptor.
        self.reserved: set[str] = set()
        # Ageing, from PriorityBoosted: each managed job's clock and latest boost. A run of a
        # workload with a clock is a run ageing brought back (protectFor, base priority).
        self.since: dict[str, float] = {}
        self.boosts: dict[str, int] = {}
        # uid -> generation -> when its eviction for a preemption was requested (last hour).
        self.preempted_at: dict[str, dict[int, float]] = {}
        # victim uid -> preemptor uid -> when it last asked to evict it (last hour).
        self.preempted_by: dict[str, dict[str, float]] = {}
        self.queue_of: dict[str, str] = {}  # uid -> its ClusterQueue, pending or admitted
        self._protections: dict[str, Protection] = {}
        # event type -> its fold (apply; the service's live loop looks an event's fold up here
        # itself, one call per event fewer)
        self.folds: dict[type, Callable[[Any], None]] = {
            WorkloadPending: self._pending,
            WorkloadSubmitted: self._submitted,
            WorkloadAdmitted: self._admitted,
            WorkloadFinished: self._finished,
            WorkloadEvicted: self._evicted,
            WorkloadDeleted: self._deleted,
            EvictionRequested: self._eviction_requested,
            PriorityBoosted: self._boosted,
        }

    # --- config ---------------------------------------------------------------------------

    def set_config(self, objects: Iterable[ConfigObject]) -> None:
        objects = list(objects)
        self.cluster_queues = {o.metadata.name: o for o in objects if isinstance(o, ClusterQueue)}
        self.cohorts = [o for o in objects if isinstance(o, Cohort)]
        self.policies = [o for o in objects if isinstance(o, ClusterQueuePolicy)]
        self._protections = {}
        configurations = [o for o in objects if isinstance(o, Configuration)]
        self.configuration = configurations[0] if configurations else None
        self._rebuild_tree()

    def _rebuild_tree(self) -> None:
        self.tree = BorrowingTree.build(self.cluster_queues.values(), self.cohorts)
        for workload in self.running.values():
            if workload.cluster_queue in self.cluster_queues:
                self.tree.add_usage(workload.cluster_queue, workload.usage)
        self.holds.clear()  # the new tree has none: each flight's hold is applied again
        for preemptor_uid in self.in_flight:
            self._sync_hold(preemptor_uid)

    def minimum_run_time(self, cluster_queue: str) -> float:
        """Seconds a workload in this ClusterQueue runs before it may be preempted (0: off)."""
        return self.protection(cluster_queue).minimum_run_time

    def protection(self, cluster_queue: str) -> Protection:
        """The ClusterQueue's protections from its ClusterQueuePolicy (cached per config)."""
        found = self._protections.get(cluster_queue)
        if found is None:
            spec = policy_for(self.policies, cluster_queue).spec
            ageing = spec.ageing or AgeingPolicy()
            found = Protection(
                minimum_run_time=_seconds(spec.minimum_run_time),
                protect_for=_seconds(ageing.protect_for),
                per_hour=spec.max_preemptions_per_hour,
            )
            self._protections[cluster_queue] = found
        return found

    def protected_until(
        self, w: Running, now: float, *, for_reservation: bool = False, preemptor: str = ""
    ) -> float:
        """When ``w`` may be a victim of ``preemptor`` (services/preemption/protection.py)."""
        uid = w.ref.uid
        # Most candidates were never preempted: no dict or list is made for them.
        by = self.preempted_by.get(uid)
        history = self.preempted_at.get(uid)
        return protected_until(
            last_by_this_preemptor=by.get(preemptor) if by else None,
            admitted_at=w.admitted_at,
            preempted_at=list(history.values()) if history else (),
            protection=self.protection(w.cluster_queue),
            # Asked at search time: a clock announced just after the run's admission counts.
            aged=uid in self.since,
            now=now,
            for_reservation=for_reservation,
        )

    # --- events ---------------------------------------------------------------------------

    def apply(self, event: AnyEvent) -> None:
        """Fold one event; idempotent, so replays and redeliveries change nothing.

        By its exact type (events are never subclassed: tests/test_event_filters.py), one
        dict lookup, not a ``match`` that tried up to eight class patterns per event with the
        most frequent event, a pending decision, last. A type with no fold here (a start,
        pod readiness) changes nothing."""
        fold = self.folds.get(type(event))
        if fold is not None:
            fold(event)

    def _submitted(self, event: WorkloadSubmitted) -> None:
        self.queue_times.setdefault(event.workload.uid, event.created.timestamp())

    def _admitted(self, event: WorkloadAdmitted) -> None:
        uid = event.workload.uid
        if self.generations.get(uid, 0) >= event.generation:
            return
        # Else _release has nothing to do: a victim is always running (victim_of only takes
        # a running workload, and _release ends both together; test_preemption_fold_kinds).
        if uid in self.running:
            self._release(uid)
        self.generations[uid] = event.generation
        admitted_at = event.time.timestamp()
        aged = uid in self.since
        history = self.preempted_at.get(uid)
        queue = event.cluster_queue
        # By position, in Running's field order: keywords cost the fold's busiest call more.
        running = Running(
            event.workload,
            queue,
            # A boost shields a run only while it is protected (protectFor): then it
            # is a candidate at its base priority (the price rule, docs/ageing.md).
            event.priority - (self.boosts.get(uid, 0) if aged else 0),
            self.queue_times.get(uid, admitted_at),  # queue_time
            admitted_at,
            quota_of(event.assignments),  # usage
            False,  # evicting
            recent(list(history.values()), admitted_at) if history else 0,  # preemptions
        )
        self.queue_of[uid] = queue
        self.running[uid] = running
        in_queue = self.running_in.get(queue)
        if in_queue is None:
            in_queue = self.running_in[queue] = {}
        in_queue[uid] = running
        if queue in self.cluster_queues:
            self.tree.add_usage(queue, running.usage)
        self.waiting.pop(uid, None)
        if self.in_flight and self.in_flight.pop(uid, None) is not None:  # got its room
            self._sync_hold(uid)

    def _evicted(self, event: WorkloadEvicted) -> None:
        if self.generations.get(event.workload.uid) == event.generation:
            self._release(event.workload.uid)

    def _finished(self, event: WorkloadFinished) -> None:
        uid = event.workload.uid
        if self.generations.get(uid) == event.generation:
            self._release(uid)
            self._forget(uid)

    def _deleted(self, event: WorkloadDeleted) -> None:
        uid = event.workload.uid
        self._release(uid)
        # Gone for good: nothing of it is kept. No admission of it can follow: admission
        # decides only for a workload it holds, and a deposed leader's late one is fenced.
        self.generations.pop(uid, None)
        self.waiting.pop(uid, None)
        if self.in_flight.pop(uid, None) is not None:
            self._sync_hold(uid)
        self._forget(uid)

    def _eviction_requested(self, event: EvictionRequested) -> None:
        uid = event.workload.uid
        if event.reason == "Preempted":
            # Per generation: a redelivered or echoed request counts once.
            at = event.time.timestamp()
            history = self.preempted_at.setdefault(uid, {})
            history[event.generation] = at
            for generation in [g for g, t in history.items() if t <= at - HOUR]:
                del history[generation]
            if event.preemptor is not None:
                by = self.preempted_by.setdefault(uid, {})
                by[event.preemptor.uid] = at
                for gone in [p for p, t in by.items() if t <= at - HOUR]:
                    del by[gone]
        if uid in self.running and event.preemptor is not None:
            preemptor_uid = event.preemptor.uid
            before = self.victim_of.get(uid)
            if before is not None and before != preemptor_uid:
                self._leave_flight(uid, before)  # a victim holds for one preemptor
            self.victim_of[uid] = preemptor_uid
            flight = self.in_flight.get(preemptor_uid)
            if flight is None:
                pending = self.waiting.get(preemptor_uid)
                flight = InFlight(None if pending is None else self.preemptor(pending))
                self.in_flight[preemptor_uid] = flight
            flight.victims.add(uid)
            self._sync_hold(preemptor_uid)

    def _boosted(self, event: PriorityBoosted) -> None:
        uid = event.workload.uid
        if event.reserved:
            self.reserved.add(uid)
        else:
            self.reserved.discard(uid)
        self.boosts[uid] = event.boost
        if event.since is not None:
            self.since[uid] = event.since.timestamp()

    def _pending(self, event: WorkloadPending) -> None:
        if event.source == "admission":
            uid = event.workload.uid
            if event.cluster_queue in self.cluster_queues:
                self.queue_of[uid] = event.cluster_queue
            if event.preemption_may_help and event.contested:
                self.waiting[uid] = event
            else:
                self.waiting.pop(uid, None)

    def _forget(self, uid: str) -> None:
        """The workload is over: nothing of its ageing, history or queue time matters any
        more (its generation is kept until it is deleted: an echo of its last admission is
        still told from a new one)."""
        self.queue_of.pop(uid, None)
        self.queue_times.pop(uid, None)
        # The ageing and history books are empty on most clusters: not asked then.
        if self.since:
            self.since.pop(uid, None)
        if self.boosts:
            self.boosts.pop(uid, None)
        if self.preempted_at:
            self.preempted_at.pop(uid, None)
        if self.preempted_by:
            self.preempted_by.pop(uid, None)
        if self.reserved:
            self.reserved.discard(uid)

    def _release(self, uid: str) -> None:
        running = self.running.pop(uid, None)
        if running is not None:
            self.running_in[running.cluster_queue].pop(uid, None)
            if running.cluster_queue in self.cluster_queues:
                self.tree.remove_usage(running.cluster_queue, running.usage)
        preemptor = self.victim_of.pop(uid, None)
        if preemptor is not None:
            self._leave_flight(uid, preemptor)

    def _leave_flight(self, uid: str, preemptor: str) -> None:
        """The victim ``uid`` no longer leaves for ``preemptor``: its flight shrinks."""
        flight = self.in_flight.get(preemptor)
        if flight is not None:
            flight.victims.discard(uid)
            if not flight.victims:
                del self.in_flight[preemptor]  # nothing left to reserve room for
            self._sync_hold(preemptor)

    def _sync_hold(self, preemptor_uid: str) -> None:
        """Apply to the tree what the rule (holds.held_room) now asks this preemption to
        hold: called on each change of its flight, so a search finds every hold in place."""
        flight = self.in_flight.get(preemptor_uid)
        wanted = (
            Hold()
            if flight is None
            else held_room(flight.preemptor, flight.victims, self.running, self.cluster_queues)
        )
        self.holds.sync(self.tree, preemptor_uid, wanted)

    # --- questions --------------------------------------------------------------------------

    def preemptor(self, pending: WorkloadPending) -> Preemptor:
        ref: WorkloadRef = pending.workload
        return Preemptor(
            ref=ref,
            cluster_queue=pending.cluster_queue,
            priority=pending.priority,
            queue_time=self.queue_times.get(ref.uid, pending.time.timestamp()),
            needs=needs_of(pending),
        )

    def busy(self, preemptor_uid: str) -> bool:
        """Whether evictions ordered for this preemptor are still in flight."""
        return preemptor_uid in self.in_flight

    def candidates(
        self, cluster_queue: str, *, reservation: tuple[float, str] | None = None
    ) -> Iterator[Running]:
        """The running workloads of the cohort tree of ``cluster_queue`` (only there can a
        victim free room for it) that may be chosen (``choosable``)."""
        queues = {cluster_queue}
        if cluster_queue in self.tree.cluster_queues:
            queues |= cohort_members(self.tree, cluster_queue)
        of = self.choosable(reservation=reservation)
        for queue in queues:
            yield from of(queue)

    def choosable(
        self, *, reservation: tuple[float, str] | None = None
    ) -> Callable[[str], Iterator[Running]]:
        """One ClusterQueue's running workloads that may be chosen as victims: not already
        someone else's victim, and not a managed job that got back in through its ageing
        reservation. For a ``reservation`` (its clock, uid): any run but those of workloads
        whose ageing clock started earlier (they go first; so two aged workloads never
        preempt each other back and forth).

        By queue and lazy: a search reads the queues it needs only (ordering.py filters a
        queue when the search first needs it), one workload at a time.
        """
        since, victim_of, reserved = self.since, self.victim_of, self.reserved

        def of(queue: str) -> Iterator[Running]:
            for uid, w in self.running_in.get(queue, {}).items():
                if uid in victim_of:
                    continue
                if reservation is None:
                    if uid not in reserved:
                        yield w
                elif uid not in since or (since[uid], uid) > reservation:
                    yield w

        return of

    def reservation(self, uid: str) -> tuple[float, str] | None:
        """(clock, uid) of a waiting workload that holds an ageing reservation, else None."""
        if uid in self.reserved and uid not in self.running and uid in self.since:
            return (self.since[uid], uid)
        return None

    def first_reservation(self, cluster_queue: str) -> str | None:
        """The waiting reservation of ``cluster_queue`` with the earliest clock: the only one
        admission tries (they queue earliest clock first), so the only one to preempt for."""
        best: tuple[float, str] | None = None
        for uid in self.reserved:
            clock = self.reservation(uid)
            if clock is not None and self.queue_of.get(uid) == cluster_queue:
                best = clock if best is None else min(best, clock)
        return None if best is None else best[1]


def needs_of(pending: WorkloadPending) -> dict[FlavorResource, int]:
    """What a preemptor needs, per (flavor, resource): admission's contested resources (the
    last of two for the same flavor-resource counts)."""
    contested = pending.contested
    if len(contested) == 1:  # most reports: one dict display, no comprehension's frame
        only = contested[0]
        return {(only.flavor, only.resource): only.amount}
    return {(c.flavor, c.resource): c.amount for c in contested}


def _seconds(text: str | None) -> float:
    return 0.0 if text is None else parse_duration(text)
