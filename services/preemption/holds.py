"""The room an ordered preemption holds in preemption's quota tree, kept incrementally.

Preemption's tree is the real usage of the running workloads plus, for every preemption in
flight, its hold (``held_room``): its victims' usage counts as gone and its preemptor's needs
as used, so no second preemptor counts on the same room. A hold is applied once when its
first eviction is ordered and undone piece by piece as the rule stops asking for it, never by
re-applying every hold around each search (a cost every search paid for every preemption in
flight). Each hold touches only its preemptor's and victims' ClusterQueues,
so only their cohort tree. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from services.preemption.victims import Preemptor, Running
from shared.quota import FlavorResource, QuotaTree

__all__ = ["Hold", "Holds", "held_room"]

Usage = Mapping[FlavorResource, int]


@dataclass
class Hold:
    """What one preemption holds: victim uid -> (ClusterQueue, usage) taken out of the tree,
    and the preemptor's (ClusterQueue, needs) put in."""

    victims: dict[str, tuple[str, Usage]] = field(default_factory=dict)
    needs: tuple[str, Usage] | None = None


def held_room(
    preemptor: Preemptor | None,
    victims: Collection[str],
    running: Mapping[str, Running],
    known_queues: Collection[str],
) -> Hold:
    """The rule: while a preemptor's evictions are in flight, each of its victims that still
    runs holds its usage (it counts as gone) and the preemptor holds its needs (they count as
    used), so the room the victims free is promised to it and to nobody else. A victim stops
    holding when it leaves (evicted, finished, deleted or admitted again); the preemptor when
    its flight ends (its last victim left, it was admitted or it was deleted: then ``victims``
    is empty and the caller passes no preemptor). A preemptor unknown since a restart (its
    pending event was not replayed) holds no needs; a ClusterQueue the config does not know
    holds nothing."""
    hold = Hold()
    for uid in victims:
        workload = running.get(uid)
        if workload is not None and workload.cluster_queue in known_queues:
            hold.victims[uid] = (workload.cluster_queue, workload.usage)
    if preemptor is not None and preemptor.cluster_queue in known_queues:
        hold.needs = (preemptor.cluster_queue, preemptor.needs)
    return hold


class Holds:
    """The holds applied to one tree, by preemptor uid: each is applied once and undone once,
    whatever order events come in, since ``sync`` applies only the difference between what is
    applied and what the rule asks for. (The tree's usage depends only on each ClusterQueue's
    sum, not on the order of additions and removals, so the result equals applying every hold
    to the real usage from scratch.)"""

    def __init__(self) -> None:
        self.applied: dict[str, Hold] = {}

    def sync(self, tree: QuotaTree, preemptor_uid: str, wanted: Hold) -> None:
        """Bring the preemptor's applied hold to ``wanted`` (an empty Hold undoes it)."""
        current = self.applied.get(preemptor_uid) or Hold()
        for uid, (queue, usage) in current.victims.items():
            if uid not in wanted.victims:
                tree.add_usage(queue, usage)  # the victim no longer counts as gone
        for uid, (queue, usage) in wanted.victims.items():
            if uid not in current.victims:
                tree.remove_usage(queue, usage)
        if current.needs != wanted.needs:
            if current.needs is not None:
                tree.remove_usage(*current.needs)
            if wanted.needs is not None:
                tree.add_usage(*wanted.needs)
        if wanted.victims or wanted.needs is not None:
            self.applied[preemptor_uid] = wanted
        else:
            self.applied.pop(preemptor_uid, None)

    def clear(self) -> None:
        """Forget every hold (the tree they were applied to was rebuilt without them)."""
        self.applied.clear()
