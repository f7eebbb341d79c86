"""Fair sharing in admission order (Kueue's fairSharingIterator, KEP 1714).

With ``Configuration.spec.fairSharing.enable``, the heads of the ClusterQueues of one cohort
tree are not taken in Kueue's classical order (not borrowing first, then priority) but by a
tournament on dominant resource shares (:mod:`shared.fair_share`): the ClusterQueue that would
have the lowest share after admitting its head goes first. ClusterQueues without a cohort keep
the classical order; they share nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from shared.config import ClusterQueue, Cohort
from shared.fair_share import Share, node_share
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

    ``tree`` is borrowed for the computation and left as it was.
    """
    shares: dict[tuple[str, str], Share] = {}
    for name, head in heads.items():
        node = tree.cluster_queues.get(name)
        if node is None or node.root() is not root:
            continue
        tree.add_usage(name, head.usage)
        try:
            share = node_share(node, weight(node))
            for ancestor in path_to_root(node):
                shares[(ancestor.name, name)] = share
                share = node_share(ancestor, weight(ancestor))
        finally:
            tree.remove_usage(name, head.usage)

    def standing(head: Head, cohort: str) -> tuple[Any, ...]:
        share = shares[(cohort, head.cluster_queue)]
        return (head.order[0], share.borrows_any(head.usage), share.key(), *head.order[1:])

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


class Assigned(Protocol):
    """What the pass needs of a flavor assignment (services.admission.flavors.AssignResult)."""

    @property
    def fits(self) -> bool: ...

    @property
    def usage(self) -> Mapping[FlavorResource, int]: ...


R = TypeVar("R")  # a queued record (it has an order ``key``)
A = TypeVar("A", bound=Assigned)


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
    tried = 0
    active = sorted(set(names))
    while active:
        heads: dict[str, Head] = {}
        fitting: dict[str, tuple[R, A]] = {}
        for name in list(active):
            found = head_of(name)
            if found is None:
                active.remove(name)
                continue
            record, key = found
            result = assign(name, record)
            tried += 1
            if not result.fits:
                decide(name, record, result)
                continue
            heads[name] = Head(name, result.usage, key)
            fitting[name] = (record, result)
        if not heads:
            continue  # every head that did not fit was held: look at the next ones
        winner = tournament(tree, root, heads, weight)
        assert winner is not None  # heads of this tree that fit
        record, result = fitting[winner.cluster_queue]
        decide(winner.cluster_queue, record, result)
    return tried
