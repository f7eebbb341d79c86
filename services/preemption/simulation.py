"""Removing candidates from the quota tree until the preemptor fits (Kueue's
minimalPreemptions and fillBackWorkloads).

The search works on the caller's tree in place: remove_usage / add_usage are exact inverses
(a node's share in its parent is a function of its own usage only), so restoring is adding
back what was removed. That is much cheaper than copying a tree per search.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.preemption.borrowing import is_borrowing
from services.preemption.model import Reason, Running, Victim
from shared.quota import FlavorResource, QuotaNode, QuotaTree, available_at

__all__ = ["Simulation"]


class Simulation:
    """The preemptor's view of the tree while candidates are taken out and put back."""

    __slots__ = ("_contested_needs", "contested", "needs", "node", "queue", "removed", "tree")

    def __init__(
        self,
        tree: QuotaTree,
        queue: str,
        needs: Mapping[FlavorResource, int],
        contested: frozenset[FlavorResource],
    ) -> None:
        self.tree = tree
        self.queue = queue
        self.node: QuotaNode = tree.cluster_queues[queue]
        self.needs = [(fr, value) for fr, value in needs.items() if value]
        self.contested = contested
        # Only contested needs can lack available quota: usage only ever drops below what the
        # caller gave, where the others fitted. Checking them alone, first, short-circuits.
        self._contested_needs = [(fr, value) for fr, value in self.needs if fr in contested]
        # What is out of the tree right now, by identity (Running's equality compares usage).
        self.removed: dict[int, Running] = {}

    def fits(self, allow_borrowing: bool) -> bool:
        """workloadFits: every need within what is available; without borrowing, also within
        the ClusterQueue's own nominal quota."""
        node = self.node  # the tree's node of ``queue``: asked directly, not by name
        for fr, value in self._contested_needs:
            if value > available_at(node, fr):
                return False
        if not allow_borrowing:
            usage, subtree = self.node.usage, self.node.subtree
            return all(usage.get(fr, 0) + value <= subtree.get(fr, 0) for fr, value in self.needs)
        return True

    def remove(self, w: Running) -> None:
        self.tree.remove_usage(w.cluster_queue, w.usage)
        self.removed[id(w)] = w

    def add(self, w: Running) -> None:
        self.tree.add_usage(w.cluster_queue, w.usage)
        del self.removed[id(w)]

    def restore(self) -> None:
        """Put every removed workload back: the tree is as the caller gave it."""
        for w in self.removed.values():
            self.tree.add_usage(w.cluster_queue, w.usage)
        self.removed.clear()

    def within_nominal_possible(self) -> bool:
        """Whether the preemptor could ever fit without borrowing: no need above its nominal."""
        subtree = self.node.subtree
        return all(value <= subtree.get(fr, 0) for fr, value in self.needs)

    def borrowing(self, queue: str) -> bool:
        return is_borrowing(self.tree.cluster_queues[queue], self.contested)

    def minimal(
        self,
        candidates: Iterable[Running],
        allow_borrowing: bool,
        threshold: int | None = None,
        skip: set[str] | None = None,
    ) -> list[Victim]:
        """Take candidates out in order until the preemptor fits, then fill back.

        Candidates from other ClusterQueues are skipped once their queue no longer borrows.
        With ``threshold`` (borrowWithinCohort), removing an other-queue candidate at or above
        it forbids borrowing for the rest of this attempt; the ones below are reclaimed while
        borrowing. Queues found no longer borrowing are added to ``skip`` (removals never make
        a queue borrow again), so the iterator can pass over their remaining candidates.
        Leaves the tree as it found it.
        """
        if skip is None:
            skip = set()
        own = self.queue
        victims: list[Victim] = []
        fits = False
        try:
            for w in candidates:
                reason: Reason = "InClusterQueue"
                if w.cluster_queue != own:
                    if w.cluster_queue in skip:
                        continue
                    if not self.borrowing(w.cluster_queue):
                        skip.add(w.cluster_queue)
                        continue
                    reason = "InCohortReclamation"
                    if threshold is not None:
                        if w.priority >= threshold:
                            allow_borrowing = False
                        else:
                            reason = "InCohortReclaimWhileBorrowing"
                self.remove(w)
                victims.append(Victim(w, reason))
                if self.fits(allow_borrowing):
                    fits = True
                    break
            if not fits:
                return []
            return self.fill_back(victims, allow_borrowing)
        finally:
            self.restore()

    def fill_back(self, victims: list[Victim], allow_borrowing: bool) -> list[Victim]:
        """fillBackWorkloads: in reverse order (the last one removed excepted), put back each
        victim the preemptor can do without."""
        kept = list(victims)
        for i in range(len(kept) - 2, -1, -1):
            w = kept[i].workload
            self.add(w)
            if self.fits(allow_borrowing):
                kept[i] = kept[-1]  # Kueue's O(1) removal: the last victim takes slot i
                kept.pop()
            else:
                self.remove(w)
        return kept
