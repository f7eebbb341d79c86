"""Pending workloads that wait only for released quota, by root cohort and rank.

For ``borrowingYieldsToHigherPriority``: while such a workload waits, one of the same cohort
that comes after it in the order does not borrow the room it waits for. A rank is
``(deadline, -priority)``: by priority alone without wait targets (every deadline is 0), by
deadline first with them.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

__all__ = ["Rank", "WaitingForRoom"]


class Rank(NamedTuple):
    """Where a pending workload stands for yielding: lower is better."""

    deadline: float  # 0 without wait targets
    minus_priority: int

    @property
    def priority(self) -> int:
        return -self.minus_priority


class WaitingForRoom:
    def __init__(self) -> None:
        # root -> heap of (rank, uid), lazily deleted: an entry is live while _of agrees.
        self._heaps: dict[str, list[tuple[Rank, str]]] = {}
        self._live: dict[str, int] = {}  # root -> how many are waiting there
        self._of: dict[str, tuple[str, Rank]] = {}  # uid -> (root, rank)

    def add(self, uid: str, root: str, rank: Rank) -> None:
        if self._of.get(uid) == (root, rank):
            return
        self.remove(uid)
        self._of[uid] = (root, rank)
        self._live[root] = self._live.get(root, 0) + 1
        heap = self._heaps.setdefault(root, [])
        heapq.heappush(heap, (rank, uid))
        if len(heap) > 2 * self._live[root] + 64:  # mostly stale entries: rebuild
            heap[:] = [entry for entry in heap if self._of.get(entry[1]) == (root, entry[0])]
            heapq.heapify(heap)

    def remove(self, uid: str) -> str | None:
        """Forget ``uid``. Returns its root cohort if the best rank waiting there got worse
        (so a workload that yielded may borrow now); otherwise None."""
        entry = self._of.pop(uid, None)
        if entry is None:
            return None
        root, rank = entry
        self._live[root] -= 1
        best = self.best(root)
        return root if best is None or best > rank else None

    def best(self, root: str) -> Rank | None:
        """The best (lowest) rank waiting in ``root``."""
        heap = self._heaps.get(root)
        while heap:
            rank, uid = heap[0]
            if self._of.get(uid) == (root, rank):
                return rank
            heapq.heappop(heap)
        return None

    def clear(self) -> None:
        self._heaps.clear()
        self._live.clear()
        self._of.clear()
