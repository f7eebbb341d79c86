"""Every workload's wait, so that every pending workload ages, not only a preempted managed job.

Recovery folds each workload's facts here (its request, its ClusterQueue, whether it runs,
when its current wait began) and gives a waiting workload its ageing clock by
``shared.starvation.ageing_clock``: the start of the first wait that lasted ``reserveAfter``.
From then on it is boosted and due a reservation like a preempted managed job
(docs/ageing.md); ``Aged`` lists every clock of a ClusterQueue for the share rule.

Recovery's own announcements (``PriorityBoosted``) fold here too: read back from the stream
at start, they give a restarted recovery each clock it had set (kept for good, even when the
wait under way began later) and the reservations it had granted (kept while the job waits).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from shared.config import AgeingPolicy, ClusterQueuePolicy, ageing_of
from shared.durations import parse_duration
from shared.events import (
    AnyEvent,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.starvation import ageing_clock, request_of

__all__ = [
    "WAIT_HISTORY",
    "WAIT_VERBS",
    "Aged",
    "Wait",
    "Waits",
    "earlier_totals",
    "least_reserve_after",
]

# The workload facts (berth.wl.<verb>.…) a wait needs; admission's admitted and pending
# decisions (berth.cq.…) too.
WAIT_VERBS = frozenset({"submitted", "evicted", "finished", "deleted"})
# Stale entries Waits._young may hold beyond twice the waits before it is made anew.
YOUNG_SLACK = 16_384
# What recovery reads back from the stream's start when it starts (its durable consumer
# resumes after what it acknowledged): those, and its own announcements with their clocks.
WAIT_HISTORY = (
    *(f"berth.wl.{verb}.>" for verb in sorted(WAIT_VERBS)),
    "berth.cq.*.admitted.>",
    "berth.cq.*.pending.>",
    "berth.job.boost.>",
)


@dataclass(slots=True)
class Wait:
    ref: WorkloadRef
    request: dict[str, int]  # milli-units per resource, the whole workload
    waiting_since: float  # its creation, or its last eviction
    cluster_queue: str = ""  # where admission queues it (its last decision)
    running: bool = False
    generation: int = 0
    since: float | None = None  # its ageing clock, once it has one (never reset)
    boost: int = 0
    reserved: bool = False
    order: int = 0  # when it was folded, among every wait: Waits.ageing yields in this order


@dataclass(frozen=True, slots=True)
class Aged:
    """A workload with an ageing clock, for the share rule."""

    clock: tuple[float, str]  # (since, uid): reservations go in this order
    cluster_queue: str
    request: dict[str, int]


def earlier_totals(aged: list[Aged]) -> dict[str, dict[str, int]]:
    """For each clock (by uid), the summed requests of the clocks of its ClusterQueue that go
    before it: what the share rule counts with it (sorted once, not once per clock)."""
    by_queue: dict[str, list[Aged]] = {}
    for entry in aged:
        by_queue.setdefault(entry.cluster_queue, []).append(entry)
    totals: dict[str, dict[str, int]] = {}
    for entries in by_queue.values():
        entries.sort(key=lambda entry: entry.clock)
        total: dict[str, int] = {}
        for entry in entries:
            totals[entry.clock[1]] = dict(total)
            for resource, value in entry.request.items():
                total[resource] = total.get(resource, 0) + value
    return totals


class Waits:
    """Every workload's wait, and which of them ``ageing`` must look at (the rest, too young
    or running, cannot get a clock at this tick): so a tick costs the waits old enough for
    the shortest ``reserveAfter`` and those with a clock, not every wait (most are young)."""

    def __init__(self) -> None:
        self.waits: dict[str, Wait] = {}  # uid -> its wait, until it ends
        # Waits without a clock, by when their wait began (each begin pushed once; an entry
        # whose wait began again, ended or got a clock is dropped when it comes out).
        self._young: list[tuple[float, int, Wait]] = []
        self._ripe: dict[str, Wait] = {}  # out of _young: old enough, no clock yet
        self._aged: dict[str, Wait] = {}  # with a clock
        self._unsorted = False  # _aged got a clock since it was last put in order
        self._folded = 0  # waits folded so far (each one's order)

    def apply(self, event: AnyEvent) -> None:
        """Fold one fact (``apply_all``)."""
        self.apply_all((event,))

    def apply_all(self, events: Iterable[AnyEvent]) -> None:
        """Fold each fact in order; idempotent.

        By its exact type (events are never subclassed: tests/test_event_filters.py), one
        dict lookup, not a ``match`` that tried up to six class patterns per event. A type
        with no fold here (a start) changes no wait. A consumer's take in one call, not one
        call per event."""
        folds = _FOLDS
        for event in events:
            fold = folds.get(type(event))
            if fold is not None:
                fold(self, event)

    def ageing(
        self,
        now: float,
        reserve_after: Callable[[str], float | None],
        *,
        least: float | None = 0.0,
    ) -> Iterator[Wait]:
        """Every workload with an ageing clock (in the order they were folded), setting it on
        those whose wait has lasted ``reserveAfter`` of their ClusterQueue's policy
        (``ageing_clock``).

        ``least``: no ClusterQueue's ``reserveAfter`` is shorter (``least_reserve_after``;
        None: reservations are off everywhere). A wait shorter than that gets no clock
        whatever its queue, so its queue's ``reserveAfter`` is not looked up, and it is not
        looked at: it waits in ``_young`` until it has lasted that long. Looked at each tick
        from then on (``_ripe``) is every wait old enough without a clock that neither runs
        nor ended: exactly the waits a look at every wait would give a clock."""
        shortest = float("inf") if least is None else least
        young, ripe = self._young, self._ripe
        while young and now - young[0][0] >= shortest:  # as ageing_clock compares
            began, _, wait = heapq.heappop(young)
            if self._waiting(wait) and wait.waiting_since == began:
                ripe[wait.ref.uid] = wait
        for uid, wait in list(ripe.items()):
            if not self._waiting(wait):
                del ripe[uid]  # ended, aged, or runs (an eviction queues it in _young again)
            elif now - wait.waiting_since >= shortest and wait.cluster_queue:
                wait.since = ageing_clock(
                    since=None,
                    waiting_since=wait.waiting_since,
                    now=now,
                    reserve_after=reserve_after(wait.cluster_queue),
                )
                if wait.since is not None:
                    self._clocked(wait)
        if self._unsorted:  # clocks were set since the last tick: in folding order again
            self._aged = dict(sorted(self._aged.items(), key=lambda item: item[1].order))
            self._unsorted = False
        yield from list(self._aged.values())

    def _waiting(self, wait: Wait) -> bool:
        """Whether ``wait`` is a current wait without a clock that does not run."""
        return self.waits.get(wait.ref.uid) is wait and wait.since is None and not wait.running

    def _queue(self, wait: Wait) -> None:
        """A wait begins (again) without a clock: looked at once it has lasted the least."""
        self._compact_if_stale()
        heapq.heappush(self._young, (wait.waiting_since, wait.order, wait))

    def _compact_if_stale(self) -> None:
        """``_young`` made anew from the current waits when most of it is stale (its waits
        ended, run, or began again): when it holds more than twice the waits there are (and
        ``YOUNG_SLACK``), so no ended wait is kept alive long by it."""
        if len(self._young) <= 2 * len(self.waits) + YOUNG_SLACK:
            return
        young = self._young
        young[:] = [(w.waiting_since, w.order, w) for w in self.waits.values()
                    if w.since is None and not w.running]  # fmt: skip
        heapq.heapify(young)

    def _clocked(self, wait: Wait) -> None:
        self._ripe.pop(wait.ref.uid, None)
        self._aged[wait.ref.uid] = wait
        self._unsorted = True


def least_reserve_after(policies: Iterable[ClusterQueuePolicy]) -> float | None:
    """The shortest ``reserveAfter`` any ClusterQueue can have (``Waits.ageing``'s ``least``):
    that of a policy, or the built-in one of a ClusterQueue no policy names; None if every
    one is off (null)."""
    ageings = [AgeingPolicy(), *(ageing_of(policy) for policy in policies)]
    afters = [parse_duration(a.reserve_after) for a in ageings if a.reserve_after is not None]
    return min(afters, default=None)


# --- the folds, one per event type (Waits.apply) ------------------------------------------


def _submitted(waits: Waits, event: WorkloadSubmitted) -> None:
    if event.workload.uid not in waits.waits:
        request = request_of(event.pod_sets)
        order = waits._folded = waits._folded + 1
        began = event.created.timestamp()
        wait = waits.waits[event.workload.uid] = Wait(event.workload, request, began, order=order)
        waits._queue(wait)


def _pending(waits: Waits, event: WorkloadPending) -> None:
    wait = waits.waits.get(event.workload.uid)
    if wait is not None and event.source == "admission":
        wait.cluster_queue = event.cluster_queue or wait.cluster_queue


def _admitted(waits: Waits, event: WorkloadAdmitted) -> None:
    wait = waits.waits.get(event.workload.uid)
    if wait is not None and not event.reserved_only and event.generation > wait.generation:
        wait.generation, wait.running = event.generation, True
        wait.cluster_queue = event.cluster_queue


def _evicted(waits: Waits, event: WorkloadEvicted) -> None:
    wait = waits.waits.get(event.workload.uid)
    if wait is not None and wait.running and event.generation == wait.generation:
        wait.running = False
        wait.waiting_since = event.time.timestamp()
        if wait.since is None:
            waits._queue(wait)


def _boosted(waits: Waits, event: PriorityBoosted) -> None:
    wait = waits.waits.get(event.workload.uid)
    if wait is not None and event.source == "recovery":
        if wait.since is None and event.since is not None:
            wait.since = event.since.timestamp()  # the clock it was given, for good
            waits._clocked(wait)
        wait.boost, wait.reserved = event.boost, event.reserved


def _ended(waits: Waits, event: WorkloadFinished | WorkloadDeleted) -> None:
    uid = event.workload.uid
    if waits.waits.pop(uid, None) is not None:
        waits._ripe.pop(uid, None)
        waits._aged.pop(uid, None)
        waits._compact_if_stale()


# event type -> its fold
_FOLDS: dict[type, Callable[[Waits, Any], None]] = {
    WorkloadSubmitted: _submitted,
    WorkloadPending: _pending,
    WorkloadAdmitted: _admitted,
    WorkloadEvicted: _evicted,
    PriorityBoosted: _boosted,
    WorkloadFinished: _ended,
    WorkloadDeleted: _ended,
}
