"""Which ClusterQueues of a cohort tree borrow now: the first question of a victim search
(Kueue reclaims within the cohort only from ClusterQueues borrowing in a contested
flavor-resource).

Asking it of every ClusterQueue of the cohort costs each search in proportion to the cohort's
size, though most searches find nobody to reclaim from. A ``BorrowingTree`` answers it from an
index it keeps as usage changes instead. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from shared.config import ClusterQueue, Cohort
from shared.hierarchy import is_hierarchical
from shared.quota import FlavorResource, QuotaNode, QuotaTree

__all__ = [
    "BorrowingTree",
    "borrowed_in",
    "cohort_members",
    "hierarchical",
    "is_borrowing",
    "lenders",
]


def is_borrowing(node: QuotaNode, contested: Collection[FlavorResource]) -> bool:
    """Kueue's cqIsBorrowing: in a cohort and above nominal in a contested flavor-resource."""
    if node.parent is None:
        return False
    usage, subtree = node.usage, node.subtree
    for fr in contested:
        if usage.get(fr, 0) > subtree.get(fr, 0):
            return True
    return False


def borrowed_in(node: QuotaNode) -> frozenset[FlavorResource]:
    """The flavor-resources the ClusterQueue borrows in now: ``is_borrowing(node, contested)``
    exactly when this meets ``contested``. A ClusterQueue's own usage and quota are all it
    depends on (usage only moves up the tree)."""
    if node.parent is None:
        return frozenset()
    usage, subtree = node.usage, node.subtree
    return frozenset(
        fr for fr in usage.keys() | subtree.keys() if usage.get(fr, 0) > subtree.get(fr, 0)
    )


def cohort_members(tree: QuotaTree, cluster_queue: str) -> set[str]:
    """Every ClusterQueue in the preemptor's cohort tree (hierarchical cohorts: the whole tree
    under the root), the preemptor's own excluded."""
    node = tree.cluster_queues[cluster_queue]
    if node.parent is None:
        return set()
    members: set[str] = set()
    stack = [node.root()]
    while stack:
        current = stack.pop()
        for child in current.children:
            if child.is_cluster_queue:
                members.add(child.name)
            else:
                stack.append(child)
    members.discard(cluster_queue)
    return members


def lenders(
    tree: QuotaTree, cluster_queue: str, contested: Collection[FlavorResource]
) -> Collection[str]:
    """The ClusterQueues of ``cluster_queue``'s cohort tree, itself excepted, that borrow now
    in a contested flavor-resource (``is_borrowing``): the only ones reclaimWithinCohort may
    take from. A ``BorrowingTree`` answers from its index, any other tree by asking each."""
    if isinstance(tree, BorrowingTree):
        return tree.lenders(cluster_queue, contested)
    nodes = tree.cluster_queues
    return [q for q in cohort_members(tree, cluster_queue) if is_borrowing(nodes[q], contested)]


def hierarchical(tree: QuotaTree, node: QuotaNode) -> bool:
    """``is_hierarchical(node)`` (Cohorts under Cohorts in its tree): a ``BorrowingTree``
    answers from the roots it found at its build, any other tree by looking."""
    if isinstance(tree, BorrowingTree):
        return tree.hierarchical(node)
    return is_hierarchical(node)


class BorrowingTree(QuotaTree):
    """A quota tree that keeps, per cohort tree, its borrowing ClusterQueues and what they
    borrow in (``borrowed_in``). Every usage change goes through ``add_usage`` or
    ``remove_usage``, which mark the ClusterQueue; a question first brings the marked
    queues' entries up to date, so it answers as ``borrowed_in`` of every queue would now."""

    __slots__ = ("_borrowing", "_changed", "_hierarchical", "_root")

    def __init__(self) -> None:
        super().__init__()
        self._changed: set[str] | None = None  # None: every queue (nothing indexed yet)
        self._borrowing: dict[str, dict[str, frozenset[FlavorResource]]] = {}  # root -> cq ->
        self._root: dict[str, str] = {}  # cq in a cohort -> the name of its cohort tree's root
        # the roots with a Cohort child (by identity: a ClusterQueue alone is its own root
        # and may share a Cohort's name)
        self._hierarchical: set[QuotaNode] = set()

    @classmethod
    def build(
        cls, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]
    ) -> BorrowingTree:
        tree = super().build(cluster_queues, cohorts)
        assert isinstance(tree, BorrowingTree)
        # The roots with a Cohort among their children (is_hierarchical of the ClusterQueues
        # under them): the shape never changes after the build, so it is asked once here,
        # not of every child of the root per victim search.
        roots = {node.root() for node in tree.cluster_queues.values()}
        tree._hierarchical = {root for root in roots if is_hierarchical(root)}
        return tree

    def hierarchical(self, node: QuotaNode) -> bool:
        """``is_hierarchical(node)``, from the roots found at the build."""
        return node.root() in self._hierarchical

    # The base class's methods by name, not super(): Python 3.11 makes a super object per
    # call, and these run for every admission and release the service folds.
    def add_usage(self, cluster_queue: str, usage: Mapping[FlavorResource, int]) -> None:
        QuotaTree.add_usage(self, cluster_queue, usage)
        if self._changed is not None:
            self._changed.add(cluster_queue)

    def remove_usage(self, cluster_queue: str, usage: Mapping[FlavorResource, int]) -> None:
        QuotaTree.remove_usage(self, cluster_queue, usage)
        if self._changed is not None:
            self._changed.add(cluster_queue)

    def lenders(self, cluster_queue: str, contested: Collection[FlavorResource]) -> list[str]:
        """``lenders`` from the index."""
        self._refresh()
        root = self._root.get(cluster_queue)
        if root is None:
            return []
        return [
            queue
            for queue, borrowed in self._borrowing.get(root, {}).items()
            if queue != cluster_queue and not borrowed.isdisjoint(contested)
        ]

    def _refresh(self) -> None:
        changed = self._changed
        if changed is None:
            self._root = {
                name: node.root().name
                for name, node in self.cluster_queues.items()
                if node.parent is not None
            }
            self._borrowing = {}
            changed = set(self._root)
        for name in changed:
            root = self._root.get(name)
            if root is None:
                continue  # in no cohort (or unknown): never borrowing
            borrowed = borrowed_in(self.cluster_queues[name])
            entries = self._borrowing.setdefault(root, {})
            if borrowed:
                entries[name] = borrowed
            else:
                entries.pop(name, None)
        self._changed = set()
