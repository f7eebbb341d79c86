"""Pending workloads that wait only for released quota, by root cohort and priority.

For ``borrowingYieldsToHigherPriority``: while such a workload waits, a lower-priority one of
the same cohort does not borrow the room it waits for.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["WaitingForRoom"]


class WaitingForRoom:
    def __init__(self) -> None:
        self._priorities: dict[str, Counter[int]] = {}  # root -> priority -> how many
        self._of: dict[str, tuple[str, int]] = {}  # uid -> (root, priority)

    def add(self, uid: str, root: str, priority: int) -> None:
        if self._of.get(uid) == (root, priority):
            return
        self.remove(uid)
        self._of[uid] = (root, priority)
        self._priorities.setdefault(root, Counter())[priority] += 1

    def remove(self, uid: str) -> str | None:
        """Forget ``uid``. Returns its root cohort if the highest priority waiting there fell
        (so a workload that yielded may borrow now); otherwise None."""
        entry = self._of.pop(uid, None)
        if entry is None:
            return None
        root, priority = entry
        counts = self._priorities[root]
        highest = max(counts)
        counts[priority] -= 1
        if counts[priority] <= 0:
            del counts[priority]
        return root if priority == highest and (not counts or max(counts) < highest) else None

    def highest(self, root: str) -> int | None:
        """The highest priority waiting in ``root`` (few distinct priorities: cheap)."""
        counts = self._priorities.get(root)
        return max(counts) if counts else None

    def clear(self) -> None:
        self._priorities.clear()
        self._of.clear()
