"""The pure admission decision core: Kueue's queueing and quota model, without I/O.

The service layer feeds it facts (config, submitted / finished / evicted / deleted
workloads) and calls :meth:`Scheduler.schedule`, which admits everything that fits in one
pass and returns only the decisions that changed.

One pass differs from a Kueue cycle (one head per ClusterQueue) in admitting *everything*
that fits: ClusterQueue heads are merged in a global heap ordered like Kueue orders the heads
of a cycle (not borrowing first, then priority, then queue time); after each admission the
usage is updated and that queue's next head joins the heap. A pass only touches queues where
something happened since the last one (new workload, freed quota in the cohort, config);
a set-aside head whose failure is known to hold, with the message it already has, is left
where it is (``_fails_unchanged``), and the set-aside heads after it in its queue with it,
ahead of their turn, unless an admission in their cohort tree comes first
(services/admission/assigning.py, presumed.py); one known to fit by borrowing waits for
the borrowers' turn still parked (``_borrows_later``). With fair sharing on, the heads of
ClusterQueues in a cohort go by dominant resource share instead
(services/admission/fair_order.py: fair_round).
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Any

from services.admission import status
from services.admission.assigning import Assigning, Failed
from services.admission.fair_order import fair_round
from services.admission.flavors import AssignResult
from services.admission.model import (
    Admission,
    Decision,
    Inadmissible,
    QueuedWorkload,
    QueueStats,
    WorkloadView,
)
from services.admission.placement import PENDING_REASON
from services.admission.presumed import NO_KEY, Presumed
from services.admission.priorities import UnknownPriorityClass
from services.admission.queues import (
    ADMITTED,
    FINISHED,
    PENDING,
    UID,
    ClusterQueueQueue,
    OrderKey,
    Record,
    placeholder_workload,
    standing,
)
from services.admission.waiting import Rank
from shared.events import FlavorAssignment, WorkloadRef, WorkloadSubmitted, quota_of
from shared.quota import QuotaTree

__all__ = [
    "Admission",
    "Decision",
    "Inadmissible",
    "QueuedWorkload",
    "Scheduler",
    "WorkloadView",
]


# A ClusterQueue's head in the pass's heaps: its key, in queue order (keys are unique: the
# record's uid ends each; its ClusterQueue is the record's). Heads that need no borrowing
# first: one found to need borrowing moves to a second heap, popped only while the first is
# empty (as one heap of (borrowing, key) would order them, without comparing the flag in
# every comparison). The key alone, not (key, ClusterQueue): a comparison walks one tuple.
_Head = OrderKey


class Scheduler(Assigning):
    """Admission decisions for every ClusterQueue; pure and single-threaded."""

    offers = True  # parked heads offered, not moved (see schedule); tests turn it off
    left_parked = 0  # offered heads the last pass left parked as they were
    presumed = taken_back = 0  # of those, presumed ahead of their turn; taken back (presumed.py)

    # --- workload facts --------------------------------------------------------------------

    def submit(self, wl: QueuedWorkload, *, generation: int = 0) -> None:
        """A new pending workload; a duplicate (same uid) changes nothing. ``generation``:
        the admissions it already had (one queued again after it was inactive), so the
        next admission's number, and its event id, are new."""
        record = self._records.get(wl.ref.uid)
        if record is not None:
            if record.placeholder:  # the admission was restored before the submit was seen
                self._swap_workload(record, wl)
            return
        record = Record(wl)
        record.generation = generation
        self._records[wl.ref.uid] = record
        self._place(record)

    def _swap_workload(self, record: Record, wl: QueuedWorkload) -> None:
        lq_before = (record.wl.ref.namespace, record.lq_name)
        record.replace_workload(wl)  # no longer a placeholder
        if record.state == ADMITTED and record.usage is not None:
            self._books.lq_admitted_by(lq_before, record.usage, -1)
            self._books.lq_admitted_by((wl.ref.namespace, record.lq_name), record.usage, 1)
        try:
            record.base = self._config.priorities.resolve(
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
            record = Record(placeholder_workload(ref))
            self._records[ref.uid] = record
        if record.state == ADMITTED:
            if record.cq == cluster_queue and list(record.assignments) == list(assignments):
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
        self._boost_held_back.discard(ref.uid)

    def draining(self) -> list[tuple[WorkloadRef, str, str]]:
        """Admitted workloads of a HoldAndDrain ClusterQueue or LocalQueue, with Kueue's
        eviction reason: (ref, cluster queue, ClusterQueueStopped | LocalQueueStopped)."""
        draining_cqs, draining_lqs = self._config.draining_cqs, self._config.draining_lqs
        if not draining_cqs and not draining_lqs:
            return []
        result = []
        for record in self._records.values():
            if record.state != ADMITTED:
                continue
            if record.cq in draining_cqs:
                result.append((record.wl.ref, record.cq, "ClusterQueueStopped"))
            elif (record.wl.ref.namespace, record.lq_name) in draining_lqs:
                result.append((record.wl.ref, record.cq, "LocalQueueStopped"))
        return result

    def generation(self, ref: WorkloadRef) -> int:
        record = self._records.get(ref.uid)
        return 0 if record is None else record.generation

    def effective_priority(self, ref: WorkloadRef) -> int:
        """Base priority plus ageing boost (0 while the priority cannot be resolved)."""
        record = self._records.get(ref.uid)
        return 0 if record is None else record.effective_priority

    def class_priority(self, submitted: WorkloadSubmitted) -> int | None:
        """A workload's priority as the config resolves it now, held or not (None: its
        class does not exist): what a workload it does not queue (inactive) shows."""
        try:
            return self._config.priorities.resolve(
                submitted.priority_class, submitted.priority_class_name, submitted.priority
            )
        except UnknownPriorityClass:
            return None

    # --- the pass --------------------------------------------------------------------------

    def schedule(self) -> list[Decision]:
        """One pass: admit everything that fits, in order; return the decisions that changed."""
        out = self._out  # decisions noted below land here too, in order
        config = self._config
        # Parked heads are offered rather than moved (queues.py: offer_parked) where a failure
        # is read by nothing but its decision: no fair sharing, no yielding to the waiting.
        offers = self.offers and not config.fairness.enabled and not config.borrowing_yields
        offering: list[ClusterQueueQueue] = []
        for name in self.take_dirty_queues():
            queue = self._queues.get(name)
            if queue is not None:
                if offers and type(queue) is ClusterQueueQueue:
                    queue.offer_parked()
                    offering.append(queue)
                else:
                    queue.requeue_parked()
                self._ready.add(name)
        # The queue of each entry of the pass's heaps, by the id of its key (see _owner).
        owner: dict[int, ClusterQueueQueue] = {}
        # Kueue's scheduling equivalence: a workload shaped like one that just failed in the
        # same ClusterQueue, with no usage change in its cohort since, fails the same way. A
        # backlog of identical workloads then costs a dict lookup each, not a flavor search.
        failed: Failed = {}
        presumed = Presumed()  # offered heads left parked ahead of their turn
        presumes = offers and self.presumes  # see Assigning._leave_parked
        tried = left_parked = 0
        try:
            heads: list[_Head] = []
            for name in self._ready:
                queue = self._queues.get(name)
                if queue is None or queue.blocked or name in config.inactive:
                    continue
                head = queue.candidate() if queue.offered else queue.head()
                if head is not None and head.key is not None:
                    heads.append(head.key)
                    owner[id(head.key)] = queue
            self._ready = set()
            fair_roots: dict[str, list[str]] = {}  # fair sharing: cohort heads by tournament
            if config.fairness.enabled:
                in_cohort = [self._records[key[UID]].cq for key in heads]
                for name in in_cohort:
                    if config.tree.cluster_queues[name].parent is not None:
                        fair_roots.setdefault(config.root(name), []).append(name)
                heads = [
                    key
                    for key, name in zip(heads, in_cohort, strict=True)
                    if config.tree.cluster_queues[name].parent is None
                ]
            heapq.heapify(heads)
            for root, names in fair_roots.items():
                tried += fair_round(
                    config.tree,
                    config.tree.cohorts[root],
                    names,
                    config.fairness.weights,
                    head_of=self._fair_head,
                    assign=lambda name, record: self._assign(name, record, failed),
                    decide=self._decide,
                )
            borrowers: list[_Head] = []  # heads found to need borrowing: after the others
            self.quiet_queues = 0
            high = heads[0] if heads else NO_KEY  # the largest popped since heads ran empty
            while heads or borrowers:
                borrowing = not heads
                key = heapq.heappop(borrowers if borrowing else heads)
                queue = self._owner(owner, key)
                if borrowing:
                    presumed.settle()
                    high = key
                elif presumed.superseded and presumed.drop(key):
                    continue
                elif high < key:
                    high = key
                name = queue.name
                record = queue.candidate() if queue.offered else queue.head()
                if record is None:
                    continue
                if record.key is not key:  # the head changed since it was pushed
                    if record.key is not None:
                        heapq.heappush(heads, record.key)
                        owner[id(record.key)] = queue
                    continue
                tried += 1
                chain: list[Record] | None = None
                if record.parked:  # offered (see offers above)
                    left = self._leave_parked(name, queue, record, failed, high)
                    if isinstance(left, list):
                        chain = left
                        left_parked += 1
                        result = None
                    elif left is not None and self._borrows_later(left, borrowing):
                        heapq.heappush(borrowers, key)  # still offered: see _borrows_later
                        owner[id(key)] = queue
                        continue
                    else:
                        queue.take_offered(record)
                        key = record.key
                        if left is None:  # not remembered (_leave_parked looked)
                            versions = self._versions(name)
                            result = self._search(name, queue, record, failed, *versions)
                        else:
                            result = self._taken(name, record, failed, left)
                else:
                    result = self._assign(name, record, failed, queue)
                if result is not None:  # None: an offered record left parked as it was
                    if self._borrows_later(result, borrowing):
                        # Kueue admits heads that need no borrowing first. (Yielding goes by
                        # order: a borrower goes before non-borrowers that come after it.)
                        heapq.heappush(borrowers, key)
                        owner[id(key)] = queue
                        continue
                    self._decide(name, record, result, queue)
                    if record.state is ADMITTED and presumes:
                        pushes, taken_back = presumed.undo(config.root(name), high)
                        for entry, entry_queue in pushes:
                            heapq.heappush(heads, entry)
                            owner[id(entry)] = entry_queue
                        tried -= taken_back
                        left_parked -= taken_back
                    if queue.blocked:
                        continue
                following = queue.candidate() if queue.offered else queue.head()
                following_key = None if following is None else following.key
                if following_key is not None:
                    heapq.heappush(heads, following_key)
                    owner[id(following_key)] = queue
                if chain:
                    presumed.add(config.root(name), queue, chain, following_key)
                    tried += len(chain)
                    left_parked += len(chain)
        finally:  # an offer outliving its pass would be read as current by the next
            for queue in offering:
                queue.release_offered()
        self._out = []
        self.tried, self.left_parked = tried, left_parked
        self.presumed, self.taken_back = presumed.count, presumed.taken_back
        # A nomination ends with its evictions: a preemptor that still does not fit must not
        # hold its ClusterQueue (preemption looks at it again). Decisions this makes go out
        # with the next pass.
        for preemptor in self._nominations.take_released():
            self.unnominate(preemptor)
        return out

    def _owner(self, owner: dict[int, ClusterQueueQueue], key: _Head) -> ClusterQueueQueue:
        """The queue of ``key``, an entry just popped from the pass's heaps: the one noted in
        ``owner`` when it was pushed (taken off: a small dict, where the record's lookup by
        uid is one in the table of every workload), else the queue of its record (a key
        pushed twice, by Presumed.undo: its first pop took the note). The note is the queue
        of that very key object: each push notes it, and a key in a heap is alive, so no
        other object has its id meanwhile."""
        queue = owner.pop(id(key), None)
        if queue is None:
            queue = self._queues[self._records[key[UID]].cq]  # only delete drops a record
        return queue

    def _borrows_later(self, known: AssignResult, borrowing: bool) -> bool:
        """Whether an offered (parked) head whose remembered result ``known`` holds now, popped
        before the pass turned to borrowers, goes to the borrowers still offered (not moved
        into its queue): it fits by borrowing, and Kueue admits heads that need no borrowing
        first. Its queue waits for it either way (nothing of it is pushed meanwhile); in its
        turn among the borrowers it is popped as any offered head is, so one that no longer
        fits, with the message it has, is left parked as it was instead of moved and parked
        again (its queue keeps its offers for the next pass: queues.py, ``offers``)."""
        return known.fits and known.borrows and not borrowing and not self._config.borrowing_yields

    def _decide(
        self,
        name: str,
        record: Record,
        result: AssignResult,
        queue: ClusterQueueQueue | None = None,
    ) -> None:
        """Admit the head, or note why not and set it aside (park it, or block its queue);
        ``queue``: its ClusterQueue's, if the caller has it at hand."""
        config = self._config
        if queue is None:
            queue = self._queues[name]
        yields_to = self._yields_to(name, record) if result.fits and result.borrows else None
        if result.fits and yields_to is None:
            self._admit(record, name, result)
            queue.release_one(record.shape)  # the next of its shape may fit too
            return
        if yields_to is not None:
            due = " due earlier" if config.wait_targets.enabled else ""
            message = (
                f"couldn't borrow: a workload of priority {yields_to.priority}{due} waits"
                f" for quota in cohort {config.root(name)}"
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
            queue.blocked = True  # StrictFIFO, or a reservation: nothing behind it may pass
        else:
            queue.park(record)

    def _fair_head(self, name: str) -> tuple[Record, OrderKey] | None:
        """A ClusterQueue's head for a fair-sharing round (None: none, blocked, inactive)."""
        queue = self._queues[name]
        if queue.blocked or name in self._config.inactive:
            return None
        record = queue.head()
        return None if record is None or record.key is None else (record, record.key)

    @staticmethod
    def _rank(record: Record) -> Rank:
        """Where a queued ``record`` stands for yielding."""
        assert record.key is not None
        return standing(record.key)

    def _yields_to(self, cq_name: str, record: Record) -> Rank | None:
        """The rank of the waiting workload a borrowing ``record`` must yield to, if any."""
        if not self._config.borrowing_yields:
            return None
        waiting = self._waiting.best(self._config.root(cq_name))
        return waiting if waiting is not None and waiting < self._rank(record) else None

    def _track_waiting(self, record: Record, cq_name: str, waits_for_room: bool) -> None:
        if not self._config.borrowing_yields:
            return  # nobody yields: nothing to keep
        uid = record.wl.ref.uid
        if waits_for_room:
            self._waiting.add(uid, self._config.root(cq_name), self._rank(record))
        else:
            self._waiting.remove(uid)

    def _admit(self, record: Record, cq_name: str, result: AssignResult) -> None:
        due = status.due(record, self._config.wait_targets)  # before unqueueing drops its key
        self._unqueue(record)
        record.wl.nominate(False)  # it got its room
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
                weighted_share=self._config.fairness.share_of(self._config.tree, cq_name),
            )
        )

    # --- status (services/admission/status.py) --------------------------------------------

    def cluster_queue_status(self, name: str) -> dict[str, Any]:
        """Kueue-shaped ClusterQueue status."""
        result = status.cluster_queue_status(
            name, self._config, self._books, self._queues.get(name)
        )
        return result | self._config.fairness.cluster_queue_status(self._config.tree, name)

    def cohort_status(self, name: str) -> dict[str, Any]:
        """Kueue-shaped Cohort status (``fairSharing.weightedShare`` with fair sharing on)."""
        return self._config.fairness.cohort_status(self._config.tree, name)

    def local_queue_status(self, namespace: str, name: str) -> dict[str, Any]:
        """Kueue-shaped LocalQueue status."""
        result = status.local_queue_status(namespace, name, self._config, self._books)
        fairness = self._config.fairness
        return result | fairness.local_queue_status(self._ledger, (namespace, name), self.clock())

    def queue_stats(self) -> QueueStats:
        """Counts and usage per queue for the metrics; O(parked workloads), not O(all)."""
        stats = status.queue_stats(self._queues, self._config, self._books)
        shares, usage = self._config.fairness.gauges(self._config.tree, self._ledger, self.clock())
        return replace(stats, weighted_share=shares, lq_fair_usage=usage)

    def workload_views(self) -> list[WorkloadView]:
        """Every known workload, with queue positions for the queued pending ones."""
        return status.workload_views(
            self._records, self._queues.values(), self._config.wait_targets
        )

    # --- for tests and the preemption service ----------------------------------------------

    @property
    def quota(self) -> QuotaTree:
        """The live quota tree (read-only use, please)."""
        return self._config.tree
