"""Offered heads left parked ahead of their turn, while what they read cannot change.

In a pass, an offered (parked) head whose remembered failure holds, with the message it
already has, is left parked (scheduler.py: ``_fails_unchanged``); each costs a trip through
the pass's heap, and most are followed by more of the same ClusterQueue. What such a head
reads changes only with an admission under its cohort's root (nothing else changes usage in
a pass). So when one is left parked, the offered heads that follow it in its ClusterQueue
are checked at once against the usage of now: those whose failure holds unchanged are
*presumed* left parked, and the queue's next entry goes into the heap. A presumption stands
if no admission under their root comes before their turn; :meth:`Presumed.undo` takes back
those whose turn had not come when one does (they are offered again and tried in turn).
"""

from __future__ import annotations

from collections.abc import Callable

from services.admission.queues import ClusterQueueQueue, OrderKey, Record

__all__ = ["NO_KEY", "Presumed", "presume", "presume_all"]

NO_KEY: OrderKey = (0, 0.0, 0, 0.0, "")  # a pass's largest popped key before any is popped


def presume(
    queue: ClusterQueueQueue, high: OrderKey, holds: Callable[[Record], bool]
) -> list[Record]:
    """The offered heads of ``queue`` that come next in it and would be left parked now
    (``holds``: the scheduler's check against the usage of now), taken off its offers in
    order. It stops at the queue's queued head, at a head that would be tried, and at a key
    not above ``high``, the largest key popped since the pass's heap of heads last ran
    empty: a presumed head's turn must be known to come exactly when the heap passes its
    key (see Presumed.undo)."""
    items: list[Record] = []
    offered = queue.offered  # holds changes no queue: the queued head stays as it is
    head = queue.head()
    limit = None if head is None else head.key
    while offered:
        record = offered[-1]  # candidate's, unless the queued head comes first
        key = _key_of(record)
        if limit is not None and not key < limit:
            break
        if not high < key or not holds(record):
            break
        offered.pop()  # skip_offered
        items.append(record)
    return items


def presume_all(queue: ClusterQueueQueue, high: OrderKey) -> list[Record]:
    """``presume`` for offers known to be left parked, each (``holds`` always true): all
    of them at once when they all come before the queue's queued head and after ``high``
    (two comparisons: they are in order), else one by one."""
    offered = queue.offered
    head = queue.head()
    if offered:
        first, last = offered[-1].key, offered[0].key
        assert first is not None and last is not None
        if high < first and (head is None or head.key is None or last < head.key):
            queue.offered = []
            offered.reverse()
            return offered
    return presume(queue, high, _always)


def _always(record: Record) -> bool:
    return True


def _key_of(record: Record) -> OrderKey:
    key = record.key
    assert key is not None  # a presumed head is parked: queued
    return key


class _Chain:
    """The heads of one ClusterQueue presumed after one of them was left parked, in order,
    and the key of the entry its queue got in the heap after them (None: none)."""

    __slots__ = ("items", "next_key", "queue")

    def __init__(
        self, queue: ClusterQueueQueue, items: list[Record], next_key: OrderKey | None
    ) -> None:
        self.queue, self.items, self.next_key = queue, items, next_key


class Presumed:
    """The presumptions of one pass, by root cohort, and the heap entries they superseded."""

    __slots__ = ("_by_root", "count", "superseded", "taken_back")

    def __init__(self) -> None:
        self._by_root: dict[str, list[_Chain]] = {}
        self.count = self.taken_back = 0  # heads presumed, and taken back, in the pass
        # id of a key -> entries of it to drop when popped (see undo)
        self.superseded: dict[int, int] = {}

    def add(
        self,
        root: str,
        queue: ClusterQueueQueue,
        items: list[Record],
        next_key: OrderKey | None,
    ) -> None:
        """Presume ``items`` (taken off ``queue``'s offers, smallest key first) left parked;
        ``next_key``: the entry pushed for ``queue`` after them."""
        self._by_root.setdefault(root, []).append(_Chain(queue, items, next_key))
        self.count += len(items)

    def settle(self) -> None:
        """Every presumption stands: the pass's heap of heads ran empty, so each presumed
        head's turn has come, with no admission under its root before it (or undo would
        have taken it back). Every superseded entry has been popped too."""
        self._by_root.clear()
        self.superseded.clear()

    def undo(
        self, root: str, high: OrderKey
    ) -> tuple[list[tuple[OrderKey, ClusterQueueQueue]], int]:
        """An admission under ``root``: the presumed heads whose turn has not come are
        offered again. ``high`` is the largest key popped from the heap since the pass's
        heap of heads last ran empty, the admitted head's included; a presumed head's key
        was above it when presumed (see presume), so its turn has come exactly when
        ``high`` has passed it (the heap pops it before anything larger). Returns the heap
        entries to push (the first head taken back of each ClusterQueue, with its queue) and
        how many heads were taken back. The queue's entry pushed after them is dropped when
        popped (it is pushed again when its turn comes after theirs: ``drop``)."""
        chains = self._by_root.pop(root, None)
        if not chains:
            return [], 0
        pushes: list[tuple[OrderKey, ClusterQueueQueue]] = []
        count = 0
        for chain in chains:
            items = chain.items
            first = len(items)
            while first and high < _key_of(items[first - 1]):
                first -= 1
            if first == len(items):
                continue  # every turn has come
            back = items[first:]
            chain.queue.offered.extend(reversed(back))  # offers: largest key first
            pushes.append((_key_of(back[0]), chain.queue))
            count += len(back)
            if chain.next_key is not None:
                marker = id(chain.next_key)
                self.superseded[marker] = self.superseded.get(marker, 0) + 1
        self.taken_back += count
        return pushes, count

    def drop(self, key: OrderKey) -> bool:
        """Whether the popped entry ``key`` is one ``undo`` superseded (dropped once)."""
        marker = id(key)
        count = self.superseded.get(marker)
        if not count:
            return False
        if count == 1:
            del self.superseded[marker]
        else:
            self.superseded[marker] = count - 1
        return True
