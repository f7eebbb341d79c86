"""The pure admission decision core: Kueue's queueing and quota model, without I/O.

The service layer feeds it facts (config, submitted / finished / evicted / deleted
workloads) and calls :meth:`Scheduler.schedule`, which admits everything that fits in one
pass and returns only the decisions that changed.

One pass differs from a Kueue cycle (one head per ClusterQueue) in admitting *everything*
that fits: ClusterQueue heads are merged in a global heap ordered like Kueue orders the heads
of a cycle (not borrowing first, then priority, then queue time); after each admission the
usage is updated and that queue's next head joins the heap. A pass only touches queues where
something happened since the last one (new workload, freed quota in the cohort, config).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import Any

from services.admission import partial
from services.admission.deadlines import WaitTargets
from services.admission.flavors import (
    AssignResult,
    ClusterQueueInfo,
    FlavorInfo,
    fmt_quantity,
)
from services.admission.model import (
    Admission,
    Decision,
    Inadmissible,
    QueuedWorkload,
    QueueStats,
    WorkloadView,
)
from services.admission.priorities import PriorityTable, UnknownPriorityClass
from services.admission.queues import (
    ADMITTED,
    FINISHED,
    PENDING,
    ClusterQueueQueue,
    OrderKey,
    Record,
    order_key,
    standing,
)
from services.admission.waiting import Rank, WaitingForRoom
from shared.config import (
    ClusterQueue,
    Cohort,
    ConfigObject,
    Configuration,
    LocalQueue,
    Namespace,
    ResourceFlavor,
)
from shared.events import FlavorAssignment, WorkloadRef, quota_of
from shared.quota import FlavorResource, QuotaTree

__all__ = [
    "Admission",
    "Decision",
    "Inadmissible",
    "QueuedWorkload",
    "Scheduler",
    "WorkloadView",
]

_STATES = {PENDING: "pending", ADMITTED: "admitted", FINISHED: "finished"}
_NAME_LABEL = "kubernetes.io/metadata.name"
# Kueue's workload condition reasons: controller-level problems vs. scheduler verdicts.
INADMISSIBLE = "Inadmissible"
PENDING_REASON = "Pending"
_LQ_BLOCKED = "Can't submit new workloads to clusterQueue"


def _add(target: dict[FlavorResource, int], usage: dict[FlavorResource, int], sign: int) -> None:
    for fr, value in usage.items():
        target[fr] = target.get(fr, 0) + sign * value


class Scheduler:
    """Admission decisions for every ClusterQueue; pure and single-threaded."""

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._flavors: dict[str, FlavorInfo] = {}
        self._cqs: dict[str, ClusterQueueInfo] = {}
        self._inactive: dict[str, tuple[str, str]] = {}  # cq -> (reason, message)
        self._draining_cqs: set[str] = set()
        self._draining_lqs: set[tuple[str, str]] = set()
        self._lqs: dict[tuple[str, str], LocalQueue] = {}
        self._namespaces: dict[str, dict[str, str]] = {}
        self._ns_match: dict[tuple[str, str], bool] = {}
        self._priorities = PriorityTable()
        self._tree = QuotaTree()
        self._queues: dict[str, ClusterQueueQueue] = {}
        self._cohort_members: dict[str, list[str]] = {}  # root node name -> its ClusterQueues
        self._root_of: dict[str, str] = {}  # cq -> root node name
        # Bumped whenever usage changes under a root cohort: a failed assignment computed at
        # one version holds for every same-shaped workload of that ClusterQueue until then.
        self._usage_version: dict[str, int] = {}
        # Configuration.spec.admission.borrowingYieldsToHigherPriority, and who waits.
        self._borrowing_yields = False
        self._waiting = WaitingForRoom()
        # Configuration.spec.admission.waitTargets: deadline order when set.
        self._wait_targets = WaitTargets()
        self._ready: set[str] = set()  # queues to look at in the next pass
        self._dirty: set[str] = set()  # queues whose parked / blocked workloads get a retry
        self._out: list[Decision] = []  # decisions made outside schedule(), drained by it
        # Counters and usage per ClusterQueue / LocalQueue, kept across config changes.
        self._cq_admitted: dict[str, int] = {}
        self._cq_usage: dict[str, dict[FlavorResource, int]] = {}
        self._lq_pending: dict[tuple[str, str], int] = {}
        self._lq_admitted: dict[tuple[str, str], int] = {}
        self._lq_usage: dict[tuple[str, str], dict[FlavorResource, int]] = {}
        self.decisions = 0  # flavor assignments attempted, for benchmarks
        self._no_victims: set[str] = set()  # partial workloads preemption cannot help (uids)

    # --- configuration ---------------------------------------------------------------------

    def set_config(self, objects: Iterable[ConfigObject]) -> None:
        """Replace the whole configuration; nothing is evicted, everything is re-evaluated."""
        objects = list(objects)
        cluster_queues = [o for o in objects if isinstance(o, ClusterQueue)]
        configurations = [o for o in objects if isinstance(o, Configuration)]
        admission = configurations[0].spec.admission if configurations else None
        self._borrowing_yields = admission is not None and (
            admission.borrowing_yields_to_higher_priority
        )
        self._wait_targets = WaitTargets(admission.wait_targets if admission else ())
        self._waiting.clear()  # every pending workload is judged again in the next pass
        cohorts = [o for o in objects if isinstance(o, Cohort)]
        self._flavors = {
            o.metadata.name: FlavorInfo.from_config(o)
            for o in objects
            if isinstance(o, ResourceFlavor)
        }
        self._cqs = {
            cq.metadata.name: ClusterQueueInfo.from_config(cq, self._flavors)
            for cq in cluster_queues
        }
        self._lqs = {
            (o.metadata.namespace or "default", o.metadata.name): o
            for o in objects
            if isinstance(o, LocalQueue)
        }
        self._namespaces = {o.metadata.name: o.labels for o in objects if isinstance(o, Namespace)}
        self._ns_match = {}
        self._priorities = PriorityTable.from_config(objects)
        self._tree = QuotaTree.build(cluster_queues, cohorts)
        self._cohort_members = {}
        self._root_of = {}
        for name, node in self._tree.cluster_queues.items():
            root = node.root().name
            self._root_of[name] = root
            self._cohort_members.setdefault(root, []).append(name)
        # HoldAndDrain: what such a queue has admitted must be evicted (see draining()).
        self._draining_cqs = {
            cq.metadata.name for cq in cluster_queues if cq.spec.stop_policy == "HoldAndDrain"
        }
        self._draining_lqs = {
            key for key, lq in self._lqs.items() if lq.spec.stop_policy == "HoldAndDrain"
        }
        self._inactive = {}
        for name, info in self._cqs.items():
            problem = self._inactive_reason(info)
            if problem is not None:
                self._inactive[name] = problem
        for record in self._records.values():
            if record.state == ADMITTED and record.usage:
                self._tree.add_usage(record.cq, record.usage)
        # Rebuild every pending queue: priorities, LocalQueues and selectors may have changed.
        self._queues = {
            name: ClusterQueueQueue(info.strict_fifo, self._records)
            for name, info in self._cqs.items()
        }
        self._lq_pending = {}
        for record in self._records.values():
            if record.state == PENDING:
                record.key = None
                record.parked = False
                self._place(record)
        self._ready = set(self._queues)
        self._dirty = set()

    def _inactive_reason(self, info: ClusterQueueInfo) -> tuple[str, str] | None:
        """Kueue's ClusterQueue Active=False reason and message, or None when active."""
        reasons: list[str] = []
        messages: list[str] = []
        if info.stopped:
            reasons.append("Stopped")
            messages.append("is stopped")
        if info.missing_flavors:
            reasons.append("FlavorNotFound")
            messages.append(f"references missing ResourceFlavor(s): {info.missing_flavors}")
        if self._tree.in_cycle(info.name):
            reasons.append("CohortHasCycle")
            messages.append("cohort has a cycle")
        if not reasons:
            return None
        return reasons[0], f"Can't admit new workloads: {', '.join(messages)}."

    def _namespace_matches(self, info: ClusterQueueInfo, namespace: str) -> bool:
        cache_key = (info.name, namespace)
        cached = self._ns_match.get(cache_key)
        if cached is None:
            selector = info.namespace_selector
            labels = self._namespaces.get(namespace) or {_NAME_LABEL: namespace}
            cached = selector is not None and selector.matches(labels)
            self._ns_match[cache_key] = cached
        return cached

    # --- placing a pending workload --------------------------------------------------------

    def _place(self, record: Record) -> None:
        """Resolve LocalQueue, ClusterQueue and priority, then queue or hold the workload."""
        wl = record.wl
        namespace = wl.ref.namespace
        lq_name = record.lq_name
        record.cq = ""
        local_queue = self._lqs.get((namespace, lq_name))
        if local_queue is None:
            self._note(record, "", INADMISSIBLE, f"LocalQueue {lq_name} doesn't exist")
            return
        cq_name = local_queue.spec.cluster_queue
        try:
            record.base = self._priorities.resolve(
                wl.priority_class, wl.priority_class_name, wl.priority
            )
        except UnknownPriorityClass as error:
            self._note(record, cq_name, INADMISSIBLE, str(error))
            return
        if local_queue.spec.stop_policy != "None":
            self._note(record, cq_name, INADMISSIBLE, f"LocalQueue {lq_name} is inactive")
            return
        info = self._cqs.get(cq_name)
        if info is None:
            self._note(record, cq_name, INADMISSIBLE, f"ClusterQueue {cq_name} doesn't exist")
            return
        if not self._namespace_matches(info, namespace):
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
            deadline=self._wait_targets.deadline(priority, wl.queue_time),
            reserved=wl.reserved,
            nominated=wl.nominated,
            since=wl.since,
        )
        self._queues[cq_name].push(record)
        lq = (namespace, lq_name)
        self._lq_pending[lq] = self._lq_pending.get(lq, 0) + 1
        if cq_name in self._inactive:
            self._note(record, cq_name, INADMISSIBLE, f"ClusterQueue {cq_name} is inactive")
        else:
            self._ready.add(cq_name)

    def _unqueue(self, record: Record) -> None:
        if self._borrowing_yields:
            root = self._waiting.remove(record.wl.ref.uid)
            if root is not None:
                # Who yielded to that priority may borrow now: the cohort's parked get a retry.
                self._dirty.update(self._cohort_members.get(root, ()))
        if record.key is None:
            return
        queue = self._queues.get(record.cq)
        if queue is not None:
            if queue.blocked:
                self._ready.add(record.cq)
            queue.remove(record)
        else:
            record.key = None
        lq = (record.wl.ref.namespace, record.lq_name)
        self._lq_pending[lq] = self._lq_pending.get(lq, 0) - 1

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

    # --- workload facts --------------------------------------------------------------------

    def submit(self, wl: QueuedWorkload) -> None:
        """A new pending workload; a duplicate (same uid) changes nothing."""
        record = self._records.get(wl.ref.uid)
        if record is not None:
            if record.placeholder:  # the admission was restored before the submit was seen
                self._swap_workload(record, wl)
            return
        record = Record(wl)
        self._records[wl.ref.uid] = record
        self._place(record)

    def _swap_workload(self, record: Record, wl: QueuedWorkload) -> None:
        lq_before = (record.wl.ref.namespace, record.lq_name)
        record.replace_workload(wl)
        record.placeholder = False
        if record.state == ADMITTED and record.usage is not None:
            self._count_lq(lq_before, record.usage, -1)
            self._count_lq((wl.ref.namespace, record.lq_name), record.usage, 1)
        try:
            record.base = self._priorities.resolve(
                wl.priority_class, wl.priority_class_name, wl.priority
            )
        except UnknownPriorityClass:
            record.base = None

    def restore_admission(
        self,
        ref: WorkloadRef,
        cluster_queue: str,
        assignments: list[FlavorAssignment],
        generation: int | None = None,
    ) -> None:
        """Replay a past admission (after a restart); idempotent, emits nothing."""
        record = self._records.get(ref.uid)
        if record is None:
            record = Record(QueuedWorkload(ref=ref, local_queue="", pod_sets=[], queue_time=0.0))
            record.placeholder = True
            self._records[ref.uid] = record
        if record.state == ADMITTED:
            if record.cq == cluster_queue and record.assignments == assignments:
                if generation is not None:
                    record.generation = max(record.generation, generation)
                return
            self._release(record)
        elif record.state == PENDING:
            self._unqueue(record)
        self._apply_admission(record, cluster_queue, list(assignments), quota_of(assignments))
        # A replayed admission is a new admission unless the caller knows its number.
        record.generation = (
            record.generation + 1 if generation is None else max(record.generation, generation)
        )

    def finish(self, ref: WorkloadRef) -> None:
        """The workload is done: release its quota; it stays known as finished."""
        record = self._records.get(ref.uid)
        if record is None or record.state == FINISHED:
            return
        if record.state == ADMITTED:
            self._release(record)
        else:
            self._unqueue(record)
        record.state = FINISHED

    def evict(self, ref: WorkloadRef) -> None:
        """Release the quota; the workload is pending again with its original queue time."""
        record = self._records.get(ref.uid)
        if record is None or record.state != ADMITTED:
            return
        self._release(record)
        record.state = PENDING
        record.emitted = None
        self._place(record)

    def delete(self, ref: WorkloadRef) -> None:
        record = self._records.get(ref.uid)
        if record is None:
            return
        if record.state == ADMITTED:
            self._release(record)
        elif record.state == PENDING:
            self._unqueue(record)
        del self._records[ref.uid]
        self._no_victims.discard(ref.uid)

    def no_victims(self, ref: WorkloadRef) -> None:
        """Preemption cannot help this pending workload: if it may run with fewer pods, it
        is looked at again for the largest counts that fit now (partial.assign)."""
        record = self._records.get(ref.uid)
        if record is None or ref.uid in self._no_victims:
            return
        if record.state != PENDING or not partial.can_be_partial(record.wl.pod_sets):
            return
        self._no_victims.add(ref.uid)
        if record.key is not None:
            self._unqueue(record)
            self._place(record)

    def set_boost(
        self, ref: WorkloadRef, boost: int, *, reserved: bool = False, since: float = 0.0
    ) -> None:
        """Change a workload's ageing boost, reservation and clock; it is re-queued in order."""
        record = self._records.get(ref.uid)
        if record is None or not record.set_ageing(boost, reserved, since):
            return
        if record.state == PENDING and record.key is not None:
            self._unqueue(record)
            self._place(record)

    def nominate(self, ref: WorkloadRef) -> None:
        """Victims are being evicted for this pending workload: the room is kept for it."""
        record = self._records.get(ref.uid)
        if record is None or record.state != PENDING or record.wl.nominated:
            return
        record.wl.nominated = True
        if record.key is not None:
            self._unqueue(record)
            self._place(record)

    def unnominate(self, ref: WorkloadRef) -> None:
        """The nomination is over (its victims are gone); it queues as anyone else again."""
        record = self._records.get(ref.uid)
        if record is None or not record.wl.nominated:
            return
        record.wl.nominated = False
        if record.state == PENDING and record.key is not None:
            self._unqueue(record)
            self._place(record)

    def draining(self) -> list[tuple[WorkloadRef, str, str]]:
        """Admitted workloads of a HoldAndDrain ClusterQueue or LocalQueue, with Kueue's
        eviction reason: (ref, cluster queue, ClusterQueueStopped | LocalQueueStopped)."""
        if not self._draining_cqs and not self._draining_lqs:
            return []
        result = []
        for record in self._records.values():
            if record.state != ADMITTED:
                continue
            if record.cq in self._draining_cqs:
                result.append((record.wl.ref, record.cq, "ClusterQueueStopped"))
            elif (record.wl.ref.namespace, record.lq_name) in self._draining_lqs:
                result.append((record.wl.ref, record.cq, "LocalQueueStopped"))
        return result

    def holds_quota(self, ref: WorkloadRef, generation: int) -> bool:
        """Whether this admission (``generation``) of the workload still holds its quota."""
        record = self._records.get(ref.uid)
        return record is not None and record.state == ADMITTED and record.generation == generation

    def generation(self, ref: WorkloadRef) -> int:
        record = self._records.get(ref.uid)
        return 0 if record is None else record.generation

    def effective_priority(self, ref: WorkloadRef) -> int:
        """Base priority plus ageing boost (0 while the priority cannot be resolved)."""
        record = self._records.get(ref.uid)
        return 0 if record is None else record.effective_priority

    # --- quota bookkeeping -----------------------------------------------------------------

    def _count_lq(self, lq: tuple[str, str], usage: dict[FlavorResource, int], sign: int) -> None:
        self._lq_admitted[lq] = self._lq_admitted.get(lq, 0) + sign
        _add(self._lq_usage.setdefault(lq, {}), usage, sign)

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
        self._tree.add_usage(cq_name, usage)
        self._bump_usage_version(cq_name)
        self._cq_admitted[cq_name] = self._cq_admitted.get(cq_name, 0) + 1
        _add(self._cq_usage.setdefault(cq_name, {}), usage, 1)
        self._count_lq((record.wl.ref.namespace, record.lq_name), usage, 1)

    def _release(self, record: Record) -> None:
        usage = record.usage or {}
        cq_name = record.cq
        self._tree.remove_usage(cq_name, usage)
        self._bump_usage_version(cq_name)
        self._cq_admitted[cq_name] = self._cq_admitted.get(cq_name, 0) - 1
        _add(self._cq_usage.setdefault(cq_name, {}), usage, -1)
        self._count_lq((record.wl.ref.namespace, record.lq_name), usage, -1)
        record.usage = None
        # Freed quota may help anyone sharing the cohort tree: retry their parked workloads.
        root = self._root_of.get(cq_name)
        if root is not None:
            self._dirty.update(self._cohort_members[root])

    def _bump_usage_version(self, cq_name: str) -> None:
        root = self._root_of.get(cq_name, cq_name)
        self._usage_version[root] = self._usage_version.get(root, 0) + 1

    # --- the pass --------------------------------------------------------------------------

    def schedule(self) -> list[Decision]:
        """One pass: admit everything that fits, in order; return the decisions that changed."""
        out = self._out  # decisions noted below land here too, in order
        for name in self._dirty:
            queue = self._queues.get(name)
            if queue is not None:
                queue.requeue_parked()
                self._ready.add(name)
        self._dirty = set()
        heads: list[tuple[int, OrderKey, str]] = []
        for name in self._ready:
            queue = self._queues.get(name)
            if queue is None or queue.blocked or name in self._inactive:
                continue
            head = queue.head()
            if head is not None and head.key is not None:
                heads.append((0, head.key, name))
        self._ready = set()
        heapq.heapify(heads)
        # Kueue's scheduling equivalence: a workload shaped like one that just failed in the
        # same ClusterQueue, with no usage change in its cohort since, fails the same way. A
        # backlog of identical workloads then costs a dict lookup each, not a flavor search.
        failed: dict[tuple[str, bytes], tuple[int, AssignResult]] = {}
        while heads:
            borrowing, key, name = heapq.heappop(heads)
            queue = self._queues[name]
            record = queue.head()
            if record is None:
                continue
            if record.key is not key:  # the head changed since it was pushed
                if record.key is not None:
                    heapq.heappush(heads, (0, record.key, name))
                continue
            shape = (name, record.shape)
            version = self._usage_version.get(self._root_of.get(name, name), 0)
            cached = failed.get(shape)
            if cached is not None and cached[0] == version:
                result = cached[1]
            else:
                pod_sets = record.wl.pod_sets
                result = partial.assign(
                    self._cqs[name],
                    self._flavors,
                    self._tree,
                    pod_sets,
                    victims_possible=record.wl.ref.uid not in self._no_victims,
                )
                if not result.fits:
                    failed[shape] = (version, result)
            self.decisions += 1
            yields_to: Rank | None = None
            if result.fits and result.borrows:
                if not borrowing and not self._borrowing_yields:
                    # Kueue admits heads that need no borrowing first. (Yielding goes by
                    # order: a borrower goes before non-borrowers that come after it.)
                    heapq.heappush(heads, (1, key, name))
                    continue
                yields_to = self._yields_to(name, record)
            if result.fits and yields_to is None:
                self._admit(record, name, result)
                queue.release_one(record.shape)  # the next of its shape may fit too
            else:
                if yields_to is not None:
                    due = " due earlier" if self._wait_targets.enabled else ""
                    message = (
                        f"couldn't borrow: a workload of priority {-yields_to[1]}{due} waits"
                        f" for quota in cohort {self._root_of.get(name, name)}"
                    )
                    self._note(record, name, PENDING_REASON, message)
                else:
                    self._note(
                        record,
                        name,
                        PENDING_REASON,
                        result.message,
                        result.preemption_may_help,
                        result.preempt_flavors,
                        result.contested,
                    )
                    self._track_waiting(record, name, result.waits_for_room)
                if queue.strict or record.wl.reserved or record.wl.nominated:
                    # StrictFIFO, or a reservation: nothing behind it may pass.
                    queue.blocked = True
                    continue
                queue.park(record)
            following = queue.head()
            if following is not None and following.key is not None:
                heapq.heappush(heads, (0, following.key, name))
        self._out = []
        return out

    @staticmethod
    def _rank(record: Record) -> Rank:
        """Where a queued ``record`` stands for yielding."""
        assert record.key is not None
        return standing(record.key)

    def _yields_to(self, cq_name: str, record: Record) -> Rank | None:
        """The rank of the waiting workload a borrowing ``record`` must yield to, if any."""
        if not self._borrowing_yields:
            return None
        waiting = self._waiting.best(self._root_of.get(cq_name, cq_name))
        return waiting if waiting is not None and waiting < self._rank(record) else None

    def _track_waiting(self, record: Record, cq_name: str, waits_for_room: bool) -> None:
        if not self._borrowing_yields:
            return  # nobody yields: nothing to keep
        uid = record.wl.ref.uid
        if waits_for_room:
            self._waiting.add(uid, self._root_of.get(cq_name, cq_name), self._rank(record))
        else:
            self._waiting.remove(uid)

    def _admit(self, record: Record, cq_name: str, result: AssignResult) -> None:
        due = self._due(record)  # before unqueueing drops its order key
        self._unqueue(record)
        record.wl.nominated = False  # it got its room
        self._apply_admission(record, cq_name, result.assignments, result.usage)
        record.generation += 1
        self._out.append(
            Admission(
                ref=record.wl.ref,
                cluster_queue=cq_name,
                local_queue=record.lq_name,
                priority=record.base or 0,
                assignments=result.assignments,
                queue_time=record.wl.queue_time,
                due=due,
            )
        )

    # --- status ----------------------------------------------------------------------------

    def cluster_queue_status(self, name: str) -> dict[str, Any]:
        """Kueue-shaped ClusterQueue status."""
        info = self._cqs.get(name)
        queue = self._queues.get(name)
        usage = self._cq_usage.get(name, {})
        borrowed = self._tree.borrowed(name)
        flavors: list[dict[str, Any]] = []
        if info is not None:
            for flavor in info.flavor_order:
                resources = []
                for index, group in enumerate(info.groups):
                    if flavor not in group:
                        continue
                    for resource in info.covered[index]:
                        fr = (flavor, resource)
                        resources.append(
                            {
                                "name": resource,
                                "total": fmt_quantity(resource, usage.get(fr, 0)),
                                "borrowed": fmt_quantity(resource, borrowed.get(fr, 0)),
                            }
                        )
                flavors.append({"name": flavor, "resources": resources})
        admitted = self._cq_admitted.get(name, 0)
        if info is None:
            condition = _condition(False, "NotFound", f"ClusterQueue {name} doesn't exist")
        elif name in self._inactive:
            condition = _condition(False, *self._inactive[name])
        else:
            condition = _condition(True, "Ready", "Can admit new workloads")
        return {
            "pendingWorkloads": 0 if queue is None else queue.size,
            "reservingWorkloads": admitted,
            "admittedWorkloads": admitted,
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
            "conditions": [condition],
        }

    def local_queue_status(self, namespace: str, name: str) -> dict[str, Any]:
        """Kueue-shaped LocalQueue status."""
        key = (namespace, name)
        by_flavor: dict[str, list[dict[str, str]]] = {}
        for (flavor, resource), value in sorted(self._lq_usage.get(key, {}).items()):
            if value:
                by_flavor.setdefault(flavor, []).append(
                    {"name": resource, "total": fmt_quantity(resource, value)}
                )
        admitted = self._lq_admitted.get(key, 0)
        local_queue = self._lqs.get(key)
        if local_queue is None:
            condition = _condition(False, "NotFound", f"LocalQueue {name} doesn't exist")
        elif local_queue.spec.stop_policy != "None":
            condition = _condition(False, "Stopped", "LocalQueue is stopped")
        elif local_queue.spec.cluster_queue not in self._cqs:
            condition = _condition(False, "ClusterQueueDoesNotExist", _LQ_BLOCKED)
        elif local_queue.spec.cluster_queue in self._inactive:
            condition = _condition(False, "ClusterQueueIsInactive", _LQ_BLOCKED)
        else:
            condition = _condition(True, "Ready", "Can submit new workloads to localQueue")
        flavors = [{"name": f, "resources": r} for f, r in by_flavor.items()]
        return {
            "pendingWorkloads": self._lq_pending.get(key, 0),
            "reservingWorkloads": admitted,
            "admittedWorkloads": admitted,
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
            "conditions": [condition],
        }

    def queue_stats(self) -> QueueStats:
        """Counts and usage per queue for the metrics; O(parked workloads), not O(all)."""
        pending: dict[str, tuple[int, int]] = {}
        lq_inadmissible: dict[tuple[str, str], int] = {}
        for name, queue in self._queues.items():
            # An inactive ClusterQueue admits nothing: all its workloads are inadmissible.
            aside = queue.pending() if name in self._inactive else queue.parked_records()
            pending[name] = (queue.size - len(aside), len(aside))
            for record in aside:
                lq = (record.wl.ref.namespace, record.lq_name)
                lq_inadmissible[lq] = lq_inadmissible.get(lq, 0) + 1
        return QueueStats(
            pending=pending,
            reserving=dict(self._cq_admitted),
            usage={name: dict(usage) for name, usage in self._cq_usage.items()},
            active={name: name not in self._inactive for name in self._cqs},
            lq_pending={
                lq: (count - lq_inadmissible.get(lq, 0), lq_inadmissible.get(lq, 0))
                for lq, count in self._lq_pending.items()
            },
            lq_reserving=dict(self._lq_admitted),
            lq_usage={lq: dict(usage) for lq, usage in self._lq_usage.items()},
        )

    def _due(self, record: Record) -> float | None:
        """A queued workload's deadline, if wait targets give it one."""
        if not self._wait_targets.enabled or record.key is None:
            return None
        deadline, _ = standing(record.key)
        return deadline if 0 < deadline < math.inf else None  # a reservation has none

    def workload_views(self) -> list[WorkloadView]:
        """Every known workload, with queue positions for the queued pending ones."""
        cq_position: dict[str, int] = {}
        lq_position: dict[str, int] = {}
        for queue in self._queues.values():
            per_lq: dict[tuple[str, str], int] = {}
            for index, record in enumerate(queue.pending()):
                cq_position[record.wl.ref.uid] = index
                lq = (record.wl.ref.namespace, record.lq_name)
                lq_position[record.wl.ref.uid] = per_lq.get(lq, 0)
                per_lq[lq] = per_lq.get(lq, 0) + 1
        views: list[WorkloadView] = []
        for uid, record in self._records.items():
            reason, message = ("", "") if record.emitted is None else record.emitted[:2]
            views.append(
                WorkloadView(
                    ref=record.wl.ref,
                    local_queue=record.lq_name,
                    cluster_queue=record.cq,
                    priority=record.base or 0,
                    effective_priority=record.effective_priority,
                    state=_STATES[record.state],  # type: ignore[arg-type]
                    queue_time=record.wl.queue_time,
                    assignments=list(record.assignments),
                    reason=reason if record.state == PENDING else "",
                    message=message if record.state == PENDING else "",
                    position_in_cluster_queue=cq_position.get(uid),
                    position_in_local_queue=lq_position.get(uid),
                    generation=record.generation,
                    due=self._due(record),
                )
            )
        return views

    # --- for tests and the preemption service ----------------------------------------------

    @property
    def quota(self) -> QuotaTree:
        """The live quota tree (read-only use, please)."""
        return self._tree


def _condition(active: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": "Active",
        "status": "True" if active else "False",
        "reason": reason,
        "message": message,
    }
