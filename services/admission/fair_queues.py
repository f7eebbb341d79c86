"""The pending queue of a ClusterQueue under admission fair sharing (``admissionScope``).

Same interface as :class:`services.admission.queues.ClusterQueueQueue`, so the pass does not
tell them apart: one such queue per LocalQueue underneath, and the head is the head of the
LocalQueue whose weighted consumption is lowest now (ties by the usual order). That is
Kueue's order, where workloads compare first by their LocalQueue's usage, then as usual.
StrictFIFO blocks the whole ClusterQueue, as it does without fair sharing.
"""

from __future__ import annotations

from collections.abc import Callable

from services.admission.queues import ClusterQueueQueue, Record

__all__ = ["FairShareQueue"]

LocalQueueKey = tuple[str, str]  # (namespace, name)


def _local_queue(record: Record) -> LocalQueueKey:
    return (record.wl.ref.namespace, record.lq_name)


class FairShareQueue(ClusterQueueQueue):
    """A ClusterQueue's pending workloads, ordered across LocalQueues by ``usage`` (the
    inherited heap stays empty: the LocalQueues' queues hold the records)."""

    __slots__ = ("_by_lq", "_head", "_stamp", "_usage")

    def __init__(
        self,
        strict: bool,
        records: dict[str, Record],
        usage: Callable[[LocalQueueKey], float],
        stamp: Callable[[], object] = object,
    ) -> None:
        super().__init__(strict, records)
        self._usage = usage  # a LocalQueue's weighted consumption now; lower goes first
        # Changes whenever the usages may have (services.admission.admission_fair_sharing
        # Ledger.stamp); the default never matches, so nothing is cached.
        self._stamp = stamp
        self._head: tuple[object, Record | None] | None = None  # (stamp, head) last found
        self._by_lq: dict[LocalQueueKey, ClusterQueueQueue] = {}

    def _of(self, record: Record) -> ClusterQueueQueue:
        key = _local_queue(record)
        queue = self._by_lq.get(key)
        if queue is None:
            queue = self._by_lq[key] = ClusterQueueQueue(False, self.records)
        return queue

    def push(self, record: Record) -> None:
        self._head = None
        self._of(record).push(record)
        self.size += 1
        if self.blocked and self.head() is record:
            self.blocked = False

    def remove(self, record: Record) -> None:
        if self.blocked and record.key is not None and self.head() is record:
            self.blocked = False  # the blocking head is gone: the next one deserves a try
        if record.key is not None:
            self.size -= 1
        self._head = None
        self._of(record).remove(record)

    def head(self) -> Record | None:
        """The first workload of the least-consuming LocalQueue that has one."""
        stamp = self._stamp()
        if self._head is not None and self._head[0] == stamp:
            return self._head[1]
        best: Record | None = None
        best_rank: tuple[float, tuple[object, ...]] | None = None
        for lq, queue in self._by_lq.items():
            record = queue.head()
            if record is None or record.key is None:
                continue
            rank = (self._usage(lq), tuple(record.key))
            if best_rank is None or rank < best_rank:
                best, best_rank = record, rank
        self._head = (stamp, best)
        return best

    def park(self, record: Record) -> None:
        self._head = None
        self._of(record).park(record)

    def requeue_parked(self) -> None:
        self._head = None
        self.blocked = False
        for queue in self._by_lq.values():
            queue.requeue_parked()

    def release_one(self, shape: bytes) -> None:
        self._head = None
        for queue in self._by_lq.values():
            queue.release_one(shape)

    def parked_records(self) -> list[Record]:
        return [record for queue in self._by_lq.values() for record in queue.parked_records()]

    def pending(self) -> list[Record]:
        """Every queued record, in the order they would be taken now."""
        usage = {lq: self._usage(lq) for lq in self._by_lq}
        records = [record for queue in self._by_lq.values() for record in queue.pending()]
        records.sort(key=lambda r: (usage[_local_queue(r)], tuple(r.key or ())))
        return records
