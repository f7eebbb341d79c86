"""The admission core's state, and how a pending workload gets into its ClusterQueue's queue.

:class:`Placement` holds what the core knows (the configuration as a
:class:`~services.admission.topology.Topology`, one record per workload, the pending queues,
the per-queue books) and keeps it consistent: placing a pending workload (resolving its
LocalQueue, ClusterQueue and priority, or noting why it cannot be queued), taking it out
again, moving it when what orders it changes (a nomination while its victims leave, an
ageing boost, preemption that cannot help), and adding or releasing an admission's quota.
The workload facts and the pass that use it are :class:`services.admission.scheduler.Scheduler`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from services.admission import partial
from services.admission.admission_fair_sharing import Ledger
from services.admission.books import QueueBooks
from services.admission.fair_queues import FairShareQueue
from services.admission.interning import kept_once
from services.admission.model import Decision, Inadmissible
from services.admission.nominations import Nominations
from services.admission.priorities import UnknownPriorityClass
from services.admission.queues import ADMITTED, PENDING, ClusterQueueQueue, Record, order_key
from services.admission.settled import SettledFailures
from services.admission.topology import Topology
from services.admission.waiting import WaitingForRoom
from shared.config import ConfigObject
from shared.events import FlavorAssignment, WorkloadRef
from shared.quota import FlavorResource

__all__ = ["INADMISSIBLE", "PENDING_REASON", "Placement"]

# Kueue's workload condition reasons: controller-level problems vs. scheduler verdicts.
INADMISSIBLE = "Inadmissible"
PENDING_REASON = "Pending"


class Placement:
    """The core's books; placing, unqueueing and admitting records. Pure, single-threaded."""

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._config = Topology()
        self._queues: dict[str, ClusterQueueQueue] = {}
        self._ledger: Ledger | None = None  # LocalQueues' consumption (admission fair sharing)
        self.clock: Callable[[], float] = time.time  # the ledger's time
        # Bumped whenever usage changes under a root cohort: a failed assignment computed at
        # one version holds for every same-shaped workload of that ClusterQueue until then.
        self._usage_version: dict[str, int] = {}
        # Bumped whenever a ClusterQueue's own usage changes (settled.py: _own_read).
        self._own_usage_version: dict[str, int] = {}
        self._waiting = WaitingForRoom()  # who borrowers yield to (borrowingYieldsTo...)
        self._settled = SettledFailures(self._config.tree)  # results that still hold (settled.py)
        self._verdicts: dict[tuple[str, str, bool], tuple[str, str, bool]] = {}  # see _note
        self._ready: set[str] = set()  # queues to look at in the next pass
        self._dirty: set[str] = set()  # queues whose parked / blocked workloads get a retry
        # Cohort roots whose every member's parked workloads get a retry: a root is noted
        # once per release (its members are added in the pass, take_dirty_queues), not all of
        # its members at every finish.
        self._dirty_roots: set[str] = set()
        self._out: list[Decision] = []  # decisions made outside schedule(), drained by it
        self._books = QueueBooks()  # counts and usage per queue, kept across config changes
        self._nominations = Nominations()
        self._no_victims: set[str] = set()  # partial workloads preemption cannot help (uids)
        self._boost_held_back: set[str] = set()  # uids whose ageing boost cannot preempt
        self.tried = 0  # workloads tried in the last pass (the admission-attempt metric)

    # --- configuration ---------------------------------------------------------------------

    def set_config(self, objects: Iterable[ConfigObject]) -> None:
        """Replace the whole configuration; nothing is evicted, everything is re-evaluated."""
        self._config = config = Topology.build(objects)
        self._settled = SettledFailures(config.tree)
        self._waiting.clear()  # every pending workload is judged again in the next pass
        for record in self._records.values():
            if record.state == ADMITTED and record.usage:
                config.tree.add_usage(record.cq, record.usage)
        # Rebuild every pending queue: priorities, LocalQueues and selectors may have changed.
        self._ledger = ledger = config.fairness.ledger(self._ledger)
        if ledger is not None:
            for lq, usage in self._books.lq_usage.items():
                ledger.running(lq, usage, self.clock())
        self._queues = {
            name: self._new_queue(name, info.strict_fifo) for name, info in config.cqs.items()
        }
        self._books.lq_pending = {}
        for record in self._records.values():
            if record.state == PENDING:
                record.key = None
                record.parked = False
                self._place(record)
        self._ready = set(self._queues)
        self._dirty = set()
        self._dirty_roots = set()

    def _new_queue(self, name: str, strict: bool) -> ClusterQueueQueue:
        """A pending queue; ordered across LocalQueues under admission fair sharing."""
        ledger, fairness = self._ledger, self._config.fairness
        queue: ClusterQueueQueue
        if ledger is None or name not in fairness.usage_based:
            queue = ClusterQueueQueue(strict, self._records)
        else:
            queue = FairShareQueue(
                strict,
                self._records,
                lambda lq: ledger.usage(lq, fairness.lq_weight(lq), self.clock()),
                lambda: ledger.stamp(self.clock()),
            )
        queue.name = name
        return queue

    # --- placing a pending workload --------------------------------------------------------

    def _place(self, record: Record) -> None:
        """Resolve LocalQueue, ClusterQueue and priority, then queue or hold the workload."""
        wl = record.wl
        namespace = wl.ref.namespace
        lq_name = record.lq_name
        record.cq = ""
        local_queue = self._config.lqs.get((namespace, lq_name))
        if local_queue is None:
            self._note(record, "", INADMISSIBLE, f"LocalQueue {lq_name} doesn't exist")
            return
        cq_name = local_queue.spec.cluster_queue
        try:
            record.base = self._config.priorities.resolve(
                wl.priority_class, wl.priority_class_name, wl.priority
            )
        except UnknownPriorityClass as error:
            self._note(record, cq_name, INADMISSIBLE, str(error))
            return
        if local_queue.spec.stop_policy != "None":
            self._note(record, cq_name, INADMISSIBLE, f"LocalQueue {lq_name} is inactive")
            return
        info = self._config.cqs.get(cq_name)
        if info is None:
            self._note(record, cq_name, INADMISSIBLE, f"ClusterQueue {cq_name} doesn't exist")
            return
        if not self._config.namespace_matches(info, namespace):
            self._note(
                record,
                cq_name,
                PENDING_REASON,
                "Workload namespace doesn't match ClusterQueue selector",
            )
            return
        record.cq = cq_name
        priority = record.effective_priority
        record.key = order_key(
            priority,
            wl.queue_time,
            wl.ref.uid,
            deadline=self._config.wait_targets.deadline(priority, wl.queue_time),
            reserved=wl.reserved,
            nominated=wl.nominated,
            since=wl.since,
        )
        self._queues[cq_name].push(record)
        self._books.queued((namespace, lq_name), 1)
        if cq_name in self._config.inactive:
            self._note(record, cq_name, INADMISSIBLE, f"ClusterQueue {cq_name} is inactive")
        else:
            self._ready.add(cq_name)

    def _unqueue(self, record: Record) -> None:
        if self._config.borrowing_yields:
            root = self._waiting.remove(record.wl.ref.uid)
            if root is not None:
                # Who yielded to that priority may borrow now: the cohort's parked get a retry.
                self._dirty_roots.add(root)
        if record.key is None:
            return
        queue = self._queues.get(record.cq)
        if queue is not None:
            if queue.blocked:
                self._ready.add(record.cq)
            queue.remove(record)
        else:
            record.key = None
        self._books.queued((record.wl.ref.namespace, record.lq_name), -1)

    def _note(
        self,
        record: Record,
        cq_name: str,
        reason: str,
        message: str,
        may_help: bool = False,
        preempt_flavors: tuple[tuple[str, str, str], ...] = (),
        contested: tuple[tuple[str, str, int], ...] = (),
    ) -> None:
        """Record why a workload is pending; emit a decision only if that changed."""
        emitted = (reason, message, may_help)
        if record.emitted == emitted:
            return
        # One tuple per distinct verdict: a backlog of one shape shares its message.
        record.emitted = kept_once(self._verdicts, emitted, lambda: emitted)
        self._out.append(
            Inadmissible(
                ref=record.wl.ref,
                cluster_queue=cq_name,
                reason=reason,
                message=message,
                preemption_may_help=may_help,
                preempt_flavors=preempt_flavors,
                contested=contested,
            )
        )

    def _requeue(self, record: Record) -> None:
        """Queue a queued record again: something that orders it changed."""
        if record.key is not None:
            self._unqueue(record)
            self._place(record)

    # --- what moves a pending workload in its queue: preemption and ageing ----------------

    def no_victims(self, ref: WorkloadRef) -> None:
        """Preemption cannot help this pending workload: if it may run with fewer pods, it
        is looked at again for the largest counts that fit now (partial.assign)."""
        record = self._records.get(ref.uid)
        if record is None or ref.uid in self._no_victims:
            return
        if record.state != PENDING or not partial.can_be_partial(record.wl.pod_sets):
            return
        self._no_victims.add(ref.uid)
        self._requeue(record)

    def set_boost(
        self,
        ref: WorkloadRef,
        boost: int,
        *,
        reserved: bool = False,
        since: float = 0.0,
        can_preempt: bool = False,
    ) -> None:
        """Change a workload's ageing boost, reservation and clock; it is re-queued in order.
        ``can_preempt``: whether the boost counts when it asks for preemption."""
        record = self._records.get(ref.uid)
        if record is None:
            return
        if can_preempt:
            self._boost_held_back.discard(ref.uid)
        else:
            self._boost_held_back.add(ref.uid)
        if not record.wl.age(boost, reserved, since):
            return
        if record.state == PENDING:
            self._requeue(record)

    def nominate(self, ref: WorkloadRef) -> None:
        """Victims are being evicted for this pending workload: the room is kept for it."""
        record = self._records.get(ref.uid)
        if record is None or record.state != PENDING or record.wl.nominated:
            return
        record.wl.nominate(True)
        self._requeue(record)

    def eviction_requested(
        self, victim: WorkloadRef, generation: int, preemptor: WorkloadRef | None
    ) -> None:
        """Preemption asked ``victim`` (its admission ``generation``) to go for ``preemptor``:
        the preemptor is nominated until every victim evicted for it has left (see left()).

        A victim that no longer holds that admission's quota (it finished before the request)
        frees nothing more and will never be reported leaving: nominating for it would hold
        the preemptor's ClusterQueue blocked (the Kueue benchmark's preemption, running
        behind, picked thousands of such victims)."""
        if preemptor is None or not self.holds_quota(victim, generation):
            return
        self.nominate(preemptor)
        self._nominations.add(preemptor, victim.uid)

    def left(self, ref: WorkloadRef) -> WorkloadRef | None:
        """The workload's pods are gone (evicted, finished or deleted). If it was the last
        victim a preemptor waited for, that preemptor's nomination ends after the next pass
        (the preemptor is returned: preemption may look at it again)."""
        return self._nominations.left(ref.uid)

    def leaving(self, preemptor: WorkloadRef) -> frozenset[str]:
        """The uids of the victims a nominated preemptor still waits for: why its
        ClusterQueue admits nothing else meanwhile."""
        return self._nominations.leaving(preemptor.uid)

    def unnominate(self, ref: WorkloadRef) -> None:
        """The nomination is over (its victims are gone); it queues as anyone else again."""
        record = self._records.get(ref.uid)
        if record is None or not record.wl.nominated:
            return
        record.wl.nominate(False)
        if record.state == PENDING:
            self._requeue(record)

    def holds_quota(self, ref: WorkloadRef, generation: int) -> bool:
        """Whether this admission (``generation``) of the workload still holds its quota."""
        record = self._records.get(ref.uid)
        return record is not None and record.state == ADMITTED and record.generation == generation

    def preempting_priority(self, ref: WorkloadRef) -> int:
        """The priority a pending workload preempts with: its ageing boost only if allowed
        (set_boost's ``can_preempt``), so that a boosted job never ping-pongs with the job
        that preempted it."""
        record = self._records.get(ref.uid)
        if record is None:
            return 0
        if ref.uid in self._boost_held_back:
            return record.effective_priority - record.wl.boost
        return record.effective_priority

    # --- quota bookkeeping -----------------------------------------------------------------

    def _apply_admission(
        self,
        record: Record,
        cq_name: str,
        assignments: list[FlavorAssignment],
        usage: dict[FlavorResource, int],
    ) -> None:
        record.state = ADMITTED
        record.cq = cq_name
        record.assignments = assignments
        record.usage = usage
        record.emitted = None
        self._config.tree.add_usage(cq_name, usage)
        self._bump_usage_version(cq_name)
        self._books.admitted(cq_name, (record.wl.ref.namespace, record.lq_name), usage, 1)
        if self._ledger is not None:
            self._ledger.admitted((record.wl.ref.namespace, record.lq_name), usage, 1, self.clock())

    def _release(self, record: Record) -> None:
        usage = record.usage or {}
        cq_name = record.cq
        self._config.tree.remove_usage(cq_name, usage)
        self._bump_usage_version(cq_name)
        self._books.admitted(cq_name, (record.wl.ref.namespace, record.lq_name), usage, -1)
        if self._ledger is not None:
            lq = (record.wl.ref.namespace, record.lq_name)
            self._ledger.admitted(lq, usage, -1, self.clock())
        record.usage = None
        # Freed quota may help anyone sharing the cohort tree: retry their parked workloads.
        root = self._config.root_of.get(cq_name)
        if root is not None:
            self._dirty_roots.add(root)

    def take_dirty_queues(self) -> set[str]:
        """The queues whose parked workloads get a retry in this pass (each once), and none
        from now on until more are noted: those noted one by one and every member of the
        cohorts noted whole."""
        dirty, members = self._dirty, self._config.cohort_members
        for root in self._dirty_roots:
            dirty.update(members.get(root, ()))
        self._dirty, self._dirty_roots = set(), set()
        return dirty

    def _bump_usage_version(self, cq_name: str) -> None:
        root = self._config.root(cq_name)
        self._usage_version[root] = self._usage_version.get(root, 0) + 1
        self._own_usage_version[cq_name] = self._own_usage_version.get(cq_name, 0) + 1
