"""The starvation bound: by when a waiting workload will be admitted (docs/ageing.md).

Admission shows it (``RUNS BY``, ``status.berth.runsBy``), recovery grants reservations with
the same share rule, and the simulations check it; so the formula lives here, once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.config import AgeingPolicy, ClusterQueue, ClusterQueuePolicy
from shared.durations import kube_timestamp, parse_duration
from shared.events import PodSet
from shared.quota import quotas_of

__all__ = [
    "DECISION_CYCLE_SECONDS",
    "Bound",
    "Earlier",
    "QueueFacts",
    "Waiting",
    "ageing_clock",
    "fits_share",
    "queue_facts",
    "request_of",
    "runs_by",
]

# What the bound allows for Berth's own latency per step: recovery's ageing tick (1 s), a
# scheduling pass, a victim search and the events between them. Figures: bench/starvation.py.
DECISION_CYCLE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Earlier:
    """Workloads of the same ClusterQueue that go first: aged ones whose ageing clock started
    first, or waiting ones that will have such a clock (``count`` of them, ``request`` their
    sum: a long queue is one entry)."""

    request: Mapping[str, int]  # milli-units per resource, the whole workload
    ended_at: float | None  # when it finished or was deleted; None: not yet
    count: int = 1


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """What the bound needs of a ClusterQueue (``queue_facts`` reads them from its spec)."""

    name: str
    nominal: Mapping[str, int]  # milli-units per resource, summed over its flavors
    flavors: Mapping[str, int]  # how many flavors cover each resource
    lends: Mapping[str, bool]  # per resource: in a cohort with a lendingLimit other than 0
    preempts: bool  # withinClusterQueue is not Never
    cohort: str = ""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending workload, as the bound sees it."""

    queue: QueueFacts
    request: Mapping[str, int]  # milli-units per resource, the whole workload
    since: float | None  # its ageing clock (``ageing_clock``); None: none yet
    waiting_since: float  # when the current wait began (its creation or last eviction)
    # The workloads of its ClusterQueue that go before it: aged ones with an earlier clock, and
    # waiting ones without a clock whose wait began before its clock (they gain the earlier
    # clock if they are still waiting ``reserveAfter`` after it began).
    earlier: Sequence[Earlier] = ()
    blocked: str = ""  # why admission cannot admit it at all (an inactive queue), if so


@dataclass(frozen=True, slots=True)
class Bound:
    at: float | None  # epoch seconds, whole (rounded up); None: no bound, see ``reason``
    reason: str

    @property
    def timestamp(self) -> str | None:
        return None if self.at is None else kube_timestamp(self.at)


def request_of(pod_sets: Iterable[PodSet]) -> dict[str, int]:
    """A workload's whole request, what the share rule weighs: milli-units per resource over
    all its pods."""
    total: dict[str, int] = {}
    for pod_set in pod_sets:
        for resource, value in pod_set.requests.items():
            total[resource] = total.get(resource, 0) + value * pod_set.count
    return total


def queue_facts(cluster_queue: ClusterQueue) -> QueueFacts:
    spec = cluster_queue.spec
    cohort = cluster_queue.cohort_name
    nominal: dict[str, int] = {}
    flavors: dict[str, int] = {}
    lends: dict[str, bool] = {}
    for (_, resource), quota in quotas_of(spec.resource_groups).items():
        nominal[resource] = nominal.get(resource, 0) + quota.nominal
        flavors[resource] = flavors.get(resource, 0) + 1
        lending = bool(cohort) and quota.lending_limit != 0
        lends[resource] = lends.get(resource, False) or lending
    return QueueFacts(
        name=cluster_queue.metadata.name,
        nominal=nominal,
        flavors=flavors,
        lends=lends,
        preempts=spec.preemption.within_cluster_queue != "Never",
        cohort=cohort,
    )


def fits_share(
    share: float, nominal: Mapping[str, int], requests: Iterable[Mapping[str, int]]
) -> bool:
    """Whether ``requests`` together stay within ``share`` of the nominal quota, resource by
    resource: the price rule (``maxReservedShare``) that reservations must keep."""
    total: dict[str, int] = {}
    for request in requests:
        for resource, value in request.items():
            total[resource] = total.get(resource, 0) + value
    return all(value <= share * nominal.get(resource, 0) for resource, value in total.items())


def ageing_clock(
    *, since: float | None, waiting_since: float, now: float, reserve_after: float | None
) -> float | None:
    """A workload's ageing clock at ``now``: the one it has (``since``), kept for good once
    set; else the start of its current wait (its creation, or its last eviction) once that
    wait has lasted ``reserveAfter``; else None (reservations off, or not waited so long).

    Every pending workload ages this way, plain or managed; a managed job's first preemption
    also starts its clock at once (recovery, so that it is boosted while it waits). A clock is
    always set at a moment before ``now`` by at least ``reserveAfter`` or at ``now`` (a
    preemption), so a clock set later is never earlier than one a waiting workload has or will
    have from a wait already under way: the order of reservations, and so every bound shown,
    only learns of workloads that go after.
    """
    if since is not None:
        return since
    if reserve_after is None or now - waiting_since < reserve_after:
        return None
    return waiting_since


def _ended(earlier: Earlier) -> float:
    assert earlier.ended_at is not None
    return earlier.ended_at


def _seconds(text: str | None) -> float:
    return 0.0 if text is None else parse_duration(text)


def _unbounded(waiting: Waiting, ageing: AgeingPolicy) -> str | None:
    """Why no bound can be promised, or None (the conditions of ``runs_by``)."""
    queue = waiting.queue
    if waiting.blocked:
        return waiting.blocked
    if ageing.reserve_after is None:
        return f"no reservations in ClusterQueue {queue.name} (reserveAfter: null)"
    for resource, value in sorted(waiting.request.items()):
        if queue.flavors.get(resource, 0) == 0:
            return f"resource {resource} unavailable in ClusterQueue {queue.name}"
        if queue.flavors[resource] > 1:
            return f"{queue.flavors[resource]} flavors for {resource}: no bound yet"
        if value > queue.nominal[resource]:
            return f"it needs more {resource} than ClusterQueue {queue.name}'s nominal quota"
        if queue.lends.get(resource, False):
            return f"{queue.name} lends {resource} in cohort {queue.cohort} (set lendingLimit: 0)"
    if not queue.preempts:
        return f"ClusterQueue {queue.name} preempts nothing (withinClusterQueue: Never)"
    share = ageing.max_reserved_share
    if not fits_share(share, queue.nominal, [waiting.request]):
        return f"it needs more than the {share:.0%} of the quota reservations may hold"
    return None


def runs_by(policy: ClusterQueuePolicy, waiting: Waiting) -> Bound:
    """By when a waiting workload will be admitted, or why that cannot be promised.

    ``runsBy = T + m + (k + 2) x (g + d) + d``, with

    - ``T = max(c + reserveAfter, waitingSince, t_share)``: its reservation. ``c`` is its
      ageing clock (``ageing_clock``: a managed job's first preemption, else the start of the
      first wait that lasted reserveAfter), or, without one yet, ``waitingSince``, the start of
      its current wait (it gets that clock at ``waitingSince + reserveAfter`` if still
      waiting); ``t_share`` the first moment its reservation fits the share (below);
    - ``m = max(minimumRunTime, ageing.protectFor)``: the longest a workload in its way is
      protected after its admission;
    - ``k``: the workloads of its ClusterQueue whose clocks are earlier than ``c`` (or will
      be: waiting ones whose wait began before ``c``) and that have not ended by ``T``
      (reservations go earliest clock first, one at a time, and a reservation never preempts
      an earlier clock);
    - ``g = evictionGracePeriod`` (a victim stops within it) and ``d`` =
      ``DECISION_CYCLE_SECONDS`` (Berth's own latency per step); one step more than ``k + 1``
      for preemptions already in flight when the reservation starts.

    Why: from ``T + d`` it heads its ClusterQueue and nothing else is admitted there; what
    was admitted before is unprotected by ``T + d + m`` and its reservation preempts it
    whatever its priority; each reservation ahead takes one step of ``g + d``.

    It holds for any pending workload, plain or managed, when its ClusterQueue is active and
    preempts (withinClusterQueue is not Never), reservations are on (reserveAfter), each
    resource it asks for has one flavor there, it fits within the nominal quota and within
    ``maxReservedShare`` of it together with the earlier-aged workloads still there at ``T``,
    and its ClusterQueue lends none of that quota to a cohort. Otherwise ``at`` is None and
    ``reason`` says which condition fails; a policy change recomputes it.
    """
    spec = policy.spec
    ageing = spec.ageing or AgeingPolicy()
    problem = _unbounded(waiting, ageing)
    if problem is not None:
        return Bound(None, problem)
    assert ageing.reserve_after is not None
    clock = waiting.waiting_since if waiting.since is None else waiting.since
    start = max(clock + parse_duration(ageing.reserve_after), waiting.waiting_since)
    # The earlier-aged workloads only leave: the reservation fits the share from the first
    # moment, at or after ``start``, when those still there leave it room. With what never
    # leaves, take the latest-ending ones back while they fit (a set that fits only gets
    # smaller as they leave): the first that does not is the last to wait for.
    alive = [e for e in waiting.earlier if e.ended_at is None or e.ended_at > start]
    staying = dict(waiting.request)  # it, and those with no end yet
    ahead = 0
    for e in alive:
        if e.ended_at is None:
            ahead += e.count
            for resource, value in e.request.items():
                staying[resource] = staying.get(resource, 0) + value
    share, nominal = ageing.max_reserved_share, waiting.queue.nominal
    if not fits_share(share, nominal, [staying]):
        waiting_for = sum(e.count for e in waiting.earlier if e.ended_at is None)
        return Bound(
            None,
            f"waits for {waiting_for} workload(s) that started ageing first: together they"
            f" need more than the {share:.0%} of the quota reservations may hold",
        )
    leaving = sorted((e for e in alive if e.ended_at is not None), key=_ended)
    moment, index = start, len(leaving)
    while index:
        end = _ended(leaving[index - 1])
        first = index - 1
        while first and _ended(leaving[first - 1]) == end:
            first -= 1
        with_them = dict(staying)
        for e in leaving[first:index]:
            for resource, value in e.request.items():
                with_them[resource] = with_them.get(resource, 0) + value
        if not fits_share(share, nominal, [with_them]):
            moment = end  # it fits once these (and all that end before them) have left
            break
        ahead += sum(e.count for e in leaving[first:index])
        staying, index = with_them, first
    protection = max(_seconds(spec.minimum_run_time), _seconds(ageing.protect_for))
    step = parse_duration(spec.eviction_grace_period) + DECISION_CYCLE_SECONDS
    at = moment + protection + (ahead + 2) * step + DECISION_CYCLE_SECONDS
    reason = (
        f"reserved from {kube_timestamp(moment)}; then up to {protection:g}s of protection"
        f" and {ahead + 2} steps of {step:g}s ({ahead} reservation(s) ahead)"
    )
    return Bound(float(math.ceil(at)), reason)
