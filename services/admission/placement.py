"""The admission core's state, and how a pending workload gets into its ClusterQueue's queue.

:class:`Placement` holds what the core knows (the configuration as a
:class:`~services.admission.topology.Topology`, one record per workload, the pending queues,
the per-queue books) and keeps it consistent: placing a pending workload (resolving its
LocalQueue, ClusterQueue and priority, or noting why it cannot be queued), taking it out
again, and adding or releasing an admission's quota. The facts and the pass that use it are
:class:`services.admission.scheduler.Scheduler`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from services.admission.admission_fair_sharing import Ledger
from services.admission.books import QueueBooks
from services.admission.fair_queues import FairShareQueue
from services.admission.model import Decision, Inadmissible
from services.admission.nominations import Nominations
from services.admission.priorities import UnknownPriorityClass
from services.admission.queues import ADMITTED, PENDING, ClusterQueueQueue, Record, order_key
from services.admission.topology import Topology
from services.admission.waiting import WaitingForRoom
from shared.config import ConfigObject
from shared.events import FlavorAssignment
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
        self._waiting = WaitingForRoom()  # who borrowers yield to (borrowingYieldsTo...)
        self._ready: set[str] = set()  # queues to look at in the next pass
        self._dirty: set[str] = set()  # queues whose parked / blocked workloads get a retry
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

    def _new_queue(self, name: str, strict: bool) -> ClusterQueueQueue:
        """A pending queue; ordered across LocalQueues under admission fair sharing."""
        ledger, fairness = self._ledger, self._config.fairness
        if ledger is None or name not in fairness.usage_based:
            return ClusterQueueQueue(strict, self._records)
        return FairShareQueue(
            strict,
            self._records,
            lambda lq: ledger.usage(lq, fairness.lq_weight(lq), self.clock()),
            lambda: ledger.stamp(self.clock()),
        )

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
                self._dirty.update(self._config.cohort_members.get(root, ()))
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
        record.emitted = emitted
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
            self._dirty.update(self._config.cohort_members[root])

    def _bump_usage_version(self, cq_name: str) -> None:
        root = self._config.root(cq_name)
        self._usage_version[root] = self._usage_version.get(root, 0) + 1
