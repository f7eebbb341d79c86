"""One preemption decision for one waiting preemptor, on the folded cluster: pure.

The service calls ``decide`` for each preemptor that is due a look and publishes what it
says; the starvation simulation (bench/starvation_world.py) calls the same function, so
what it checks is what the service does.

- A preemptor in a ClusterQueue where an ageing reservation waits is not helped, unless it is
  that reservation, the one with the earliest clock: admission admits nothing else there
  until it is in, so any other preemption would only take room it needs.
- A reservation searches with a priority above every other (``RESERVATION_PRIORITY``) among
  every run of its cohort but those of workloads that started ageing before it, and its
  victims' preemption budgets do not hold it back (docs/ageing.md).
- Any other preemptor searches Kueue's way at its own priority, among runs that are neither
  reservations nor protected, nor evicted by it within the hour
  (services/preemption/protection.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from services.preemption.cluster import Cluster, needs_of
from services.preemption.victims import (
    FITS,
    Running,
    SearchResult,
    Victim,
    find_victims,
    fits_now,
)
from shared.durations import kube_timestamp
from shared.events import WorkloadPending

__all__ = ["RESERVATION_PRIORITY", "Decision", "decide"]

# Above every int32 priority: a reservation outranks any workload in its way.
RESERVATION_PRIORITY = 2**31


@dataclass(frozen=True, slots=True)
class Decision:
    victims: tuple[Victim, ...] = ()
    message: str = ""  # no victims: what to tell the preemptor ("" says nothing)
    retry_at: float | None = None  # no victims: when a protection ends (epoch seconds)
    reservation: bool = False  # the victims make room for an ageing reservation


# The preemptor fits without preemption: room was freed since admission asked; its next pass
# admits the workload, and telling the user "it fits" on a pending workload would only
# confuse (the Kueue benchmark saw one such event per waiting workload). Nothing is said.
_FITS = Decision()


def decide(cluster: Cluster, uid: str, wall: float) -> Decision:
    """Victims for the waiting preemptor ``uid`` at time ``wall``, or why there are none."""
    pending = cluster.waiting.get(uid)
    if pending is None or cluster.busy(uid):
        return Decision()  # admitted meanwhile, or its victims are still leaving
    reservation: tuple[float, str] | None = None
    if cluster.reserved:  # else there is no reservation to be or to wait behind
        reservation = cluster.reservation(uid)
        first = cluster.first_reservation(pending.cluster_queue)
        if first is not None and first != uid:
            return Decision(message="waits behind an ageing reservation in its ClusterQueue")
    if fits_now(cluster.tree, cluster.cluster_queues, pending.cluster_queue, needs_of(pending)):
        return _FITS  # what the search below would answer (find_victims: FITS), without it
    ever_protected = False

    def protected(workload: Running) -> bool:
        nonlocal ever_protected
        until = cluster.protected_until(
            workload, wall, for_reservation=reservation is not None, preemptor=uid
        )
        answer = until > wall
        ever_protected = ever_protected or answer
        return answer

    result = _search(cluster, pending, protected, reservation)
    if result.victims:
        return Decision(victims=result.victims, reservation=reservation is not None)
    if result.message == FITS:
        return _FITS
    # Why the shortcut: when no candidate was protected, the search without protection is
    # the same deterministic call getting the same answers, so its result is this one: a
    # second search is made only when a candidate was protected, not after every failed one.
    unprotected = (
        _search(cluster, pending, lambda _: False, reservation) if ever_protected else result
    )
    ends: list[float] = []
    budget = False  # whether a preemption budget, not a run's protection, is what holds
    for victim in unprotected.victims:
        w = victim.workload
        until = cluster.protected_until(
            w, wall, for_reservation=reservation is not None, preemptor=uid
        )
        if until > wall:
            ends.append(until)
            budget = budget or until > cluster.protected_until(w, wall, for_reservation=True)
    if not ends:
        return Decision(message=result.message)
    until = max(ends)
    why = "a preemption budget or an eviction by it this hour" if budget else "the minimum run time"
    message = (
        f"preemption must wait: {len(ends)} candidate workload(s) are protected by {why}"
        f" until {kube_timestamp(until)}"
    )
    return Decision(message=message, retry_at=until)


def _search(
    cluster: Cluster,
    pending: WorkloadPending,
    protected: Callable[[Running], bool],
    reservation: tuple[float, str] | None,
) -> SearchResult:
    preemptor = cluster.preemptor(pending)
    if reservation is not None:
        preemptor = dataclasses.replace(preemptor, priority=RESERVATION_PRIORITY)
    configuration = cluster.configuration
    # The tree already holds the room promised to the preemptions in flight
    # (services/preemption/holds.py): no second preemptor counts on it.
    return find_victims(
        tree=cluster.tree,
        cluster_queues=cluster.cluster_queues,
        preemptor=preemptor,
        running=cluster.choosable(reservation=reservation),
        protected=protected,
        fair_sharing=None if configuration is None else configuration.spec.fair_sharing,
        cohorts={cohort.metadata.name: cohort for cohort in cluster.cohorts},
    )
