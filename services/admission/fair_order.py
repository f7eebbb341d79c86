"""Fair sharing in admission order (Kueue's fairSharingIterator, KEP 1714).

With ``Configuration.spec.fairSharing.enable``, the heads of the ClusterQueues of one cohort
tree are not taken in Kueue's classical order (not borrowing first, then priority) but by a
tournament on dominant resource shares (:mod:`shared.fair_share`): the ClusterQueue that would
have the lowest share after admitting its head goes first. ClusterQueues without a cohort keep
the classical order; they share nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from shared.config import ClusterQueue, Cohort
from shared.fair_share import Share, lendable, node_share
from shared.hierarchy import path_to_root
from shared.quantities import parse_quantity
from shared.quota import FlavorResource, QuotaNode, QuotaTree

__all__ = ["Assigned", "Head", "Weights", "fair_round", "tournament"]


@dataclass(frozen=True, slots=True)
class Head:
    """A ClusterQueue's head in this pass: the usage its flavor assignment would add, and its
    place in its own queue (``services.admission.queues.OrderKey``: rank, deadline,
    -priority, queue time, uid)."""

    cluster_queue: str
    usage: Mapping[FlavorResource, int]
    order: tuple[Any, ...]


class Weights:
    """``spec.fairSharing.weight`` of every ClusterQueue and Cohort (1 when unset)."""

    __slots__ = ("_cluster_queues", "_cohorts")

    def __init__(self, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> None:
        self._cluster_queues = {
            cq.metadata.name: parse_quantity(cq.spec.fair_sharing.weight) / 1000
            for cq in cluster_queues
            if cq.spec.fair_sharing is not None
        }
        self._cohorts = {
            cohort.metadata.name: parse_quantity(cohort.spec.fair_sharing.weight) / 1000
            for cohort in cohorts
            if cohort.spec.fair_sharing is not None
        }

    def __call__(self, node: QuotaNode) -> float:
        table = self._cluster_queues if node.is_cluster_queue else self._cohorts
        return table.get(node.name, 1.0)

    def share(self, node: QuotaNode) -> Share:
        """The node's dominant resource share now (``status.fairSharing``)."""
        return node_share(node, self(node))


def tournament(
    tree: QuotaTree,
    root: QuotaNode,
    heads: Mapping[str, Head],
    weight: Callable[[QuotaNode], float],
    memo: dict[str, tuple[Head, Share]] | None = None,
) -> Head | None:
    """The head of the cohort tree under ``root`` to consider next (None when there is none).

    Kueue's runTournament: each Cohort, from the leaves up, nominates one head among its
    children's (a ClusterQueue's own head, or what a child Cohort nominated). The child wins
    whose share *after admitting that head* is lowest: each head's usage is added in turn and
    the share of the ClusterQueue and of each Cohort on its path is taken, compared one level
    below the Cohort deciding. At each level, in order:

    1. Berth's nominated, then reserved workloads first (their rank in the queue order; like
       Kueue's PrioritizePreemptorWorkloads, so the starvation bound holds with fair sharing);
    2. a child that would not borrow the flavors the head requests, before one that would
       (Kueue's FairSharingPrioritizeNonBorrowing, on by default);
    3. the lower dominant resource share (a zero weight that borrows ranks last);
    4. the rest of the queue order: earliest deadline (with wait targets), higher effective
       priority, earlier queue time, then uid, so the outcome never depends on dict order.

    ``tree`` is borrowed for the computation and left as it was. ``memo`` (ClusterQueue ->
    head and share) saves recomputing the share of a ClusterQueue directly under ``root``
    whose head is the same: it depends on that ClusterQueue's usage only, so the caller must
    drop a ClusterQueue's entry when its usage changes.
    """
    shares: dict[tuple[str, str], Share] = {}
    lendables: dict[int, dict[str, int]] = {}  # quotas only: the same for every head

    def share_of(node: QuotaNode, delta: Mapping[FlavorResource, int] = {}) -> Share:
        assert node.parent is not None
        totals = lendables.get(id(node.parent))
        if totals is None:
            totals = lendables[id(node.parent)] = lendable(node.parent)
        return node_share(node, weight(node), delta, totals)

    for name, head in heads.items():
        node = tree.cluster_queues.get(name)
        if node is None or node.root() is not root:
            continue
        if node.parent is root and memo is not None:
            known = memo.get(name)
            if known is None or known[0] is not head:
                known = memo[name] = (head, share_of(node, head.usage))
            shares[(root.name, name)] = known[1]
            continue
        tree.add_usage(name, head.usage)
        try:
            share = share_of(node)
            for ancestor in path_to_root(node):
                shares[(ancestor.name, name)] = share
                if ancestor.parent is not None:
                    share = share_of(ancestor)
        finally:
            tree.remove_usage(name, head.usage)

    def standing(head: Head, cohort: str) -> tuple[Any, ...]:
        return _standing(head, shares[(cohort, head.cluster_queue)])

    def play(cohort: QuotaNode) -> Head | None:
        candidates: list[Head] = []
        for child in cohort.children:
            if child.is_cluster_queue:
                nominee = heads.get(child.name)
            else:
                nominee = play(child)
            if nominee is not None:
                candidates.append(nominee)
        if not candidates:
            return None
        return min(candidates, key=lambda head: standing(head, cohort.name))

    return play(root)


def _standing(head: Head, share: Share) -> tuple[Any, ...]:
    """Where a head stands in a Cohort's choice, lowest first (see :func:`tournament`)."""
    return (head.order[0], share.borrows_any(head.usage), share.key(), *head.order[1:])


class Assigned(Protocol):
    """What the pass needs of a flavor assignment (services.admission.flavors.AssignResult)."""

    @property
    def fits(self) -> bool: ...

    @property
    def usage(self) -> Mapping[FlavorResource, int]: ...


R = TypeVar("R")  # a queued record (it has an order ``key``)
A = TypeVar("A", bound=Assigned)


@dataclass(frozen=True, slots=True)
class _Pass(Generic[R, A]):
    """What one round works with: the cohort tree and :func:`fair_round`'s callbacks."""

    tree: QuotaTree
    root: QuotaNode
    weight: Callable[[QuotaNode], float]
    head_of: Callable[[str], tuple[R, tuple[Any, ...]] | None]
    assign: Callable[[str, R], A]
    decide: Callable[[str, R, A], None]


def fair_round(
    tree: QuotaTree,
    root: QuotaNode,
    names: Iterable[str],
    weight: Callable[[QuotaNode], float],
    *,
    head_of: Callable[[str], tuple[R, tuple[Any, ...]] | None],
    assign: Callable[[str, R], A],
    decide: Callable[[str, R, A], None],
) -> int:
    """The pass over the ClusterQueues ``names`` of one cohort tree; how many heads it tried.

    Until no head is left: every head gets a flavor assignment against the usage now; a head
    that does not fit is decided at once (held: noted, parked or blocking its queue); of those
    that fit, the :func:`tournament` winner is decided (admitted, or held when it must yield),
    and the shares are compared again with the usage it added. ``head_of`` gives a
    ClusterQueue's head and its order key (None when it has none or is blocked); ``decide``
    must take the head out of the way, so the round always moves on.
    """
    pass_ = _Pass(tree, root, weight, head_of, assign, decide)
    if all(child.is_cluster_queue for child in root.children):
        return _flat_round(pass_, names)
    return _tree_round(pass_, names)


def _tree_round(pass_: _Pass[R, A], names: Iterable[str]) -> int:
    """:func:`fair_round` for any cohort tree: a tournament for every admission."""
    tree, root, weight = pass_.tree, pass_.root, pass_.weight
    head_of, assign, decide = pass_.head_of, pass_.assign, pass_.decide
    tried = 0
    active = sorted(set(names))
    # A head's assignment is made once, when it becomes its queue's head, as Kueue nominates
    # once per cycle; only the winner's is made again, against the usage now, before it is
    # decided. Usage only grows within a pass, so a head that did not fit still does not.
    nominated: dict[str, tuple[tuple[Any, ...], Head, R, A]] = {}
    memo: dict[str, tuple[Head, Share]] = {}
    while active:
        heads: dict[str, Head] = {}
        for name in list(active):
            while (found := head_of(name)) is not None:
                record, key = found
                known = nominated.get(name)
                if known is None or known[0] is not key:
                    result = assign(name, record)
                    tried += 1
                    if not result.fits:
                        decide(name, record, result)  # held: its queue's next head comes up
                        continue
                    known = nominated[name] = (key, Head(name, result.usage, key), record, result)
                heads[name] = known[1]
                break
            else:
                active.remove(name)
        if not heads:
            break
        winner = tournament(tree, root, heads, weight, memo)
        assert winner is not None  # heads of this tree that fit
        name = winner.cluster_queue
        _, _, record, _ = nominated.pop(name)
        memo.pop(name, None)  # its usage is about to change
        result = assign(name, record)
        tried += 1
        decide(name, record, result)
    return tried


def _flat_round(pass_: _Pass[R, A], names: Iterable[str]) -> int:
    """:func:`fair_round` for a cohort of ClusterQueues only: a ClusterQueue's share depends
    on its own usage alone, so a head's standing holds until its queue is decided, and a heap
    gives the tournament's winner in O(log n) instead of comparing every head each time."""
    tree, root, weight = pass_.tree, pass_.root, pass_.weight
    head_of, assign, decide = pass_.head_of, pass_.assign, pass_.decide
    totals = lendable(root)
    tried = 0
    heap: list[tuple[tuple[Any, ...], str]] = []
    nominated: dict[str, tuple[tuple[Any, ...], R]] = {}  # name -> (its standing, record)

    def nominate(name: str) -> None:
        nonlocal tried
        nominated.pop(name, None)
        while (found := head_of(name)) is not None:
            record, key = found
            result = assign(name, record)
            tried += 1
            if not result.fits:
                decide(name, record, result)  # held: its queue's next head comes up
                continue
            node = tree.cluster_queues[name]
            share = node_share(node, weight(node), result.usage, totals)
            standing = _standing(Head(name, result.usage, key), share)
            nominated[name] = (standing, record)
            heapq.heappush(heap, (standing, name))
            return

    for name in sorted(set(names)):
        nominate(name)
    while heap:
        standing, name = heapq.heappop(heap)
        entry = nominated.get(name)
        if entry is None or entry[0] is not standing:
            continue  # a stale entry: that queue was decided since
        record = entry[1]
        result = assign(name, record)  # against the usage now: it may no longer fit
        tried += 1
        decide(name, record, result)
        nominate(name)
    return tried
