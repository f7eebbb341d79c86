"""Each waiting workload's starvation bound, for ``RUNS BY`` and ``status.berth.runsBy``.

The formula is ``shared.starvation.runs_by``; this module folds what it needs from the events
admission already sees: each workload's ageing clock (``PriorityBoosted.since``), when its
current wait began (its creation, or its last ``WorkloadEvicted``), its ClusterQueue (its last
admission), its request, and when an aged workload ended; and, per ClusterQueue, the waiting
workloads without a clock yet (``waits``), which go first if their wait began earlier. Every
input is an event time, so every replica (and a restarted one) shows the same bound.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from services.admission.interning import kept_once
from services.admission.model import WorkloadView
from shared.config import ClusterQueue, ClusterQueuePolicy, policy_for
from shared.events import (
    AnyEvent,
    PodSet,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadSubmitted,
)
from shared.starvation import (
    Bound,
    Earlier,
    QueueFacts,
    Waiting,
    queue_facts,
    request_of,
    runs_by,
)

__all__ = ["AgeingBook", "QueueWaits"]

# What AgeingBook.apply folds (events are never subclassed: exact types).
_FOLDED = frozenset(
    {
        WorkloadSubmitted,
        WorkloadAdmitted,
        WorkloadEvicted,
        PriorityBoosted,
        WorkloadFinished,
        WorkloadDeleted,
    }
)


@dataclass(slots=True)
class Aged:
    since: float
    queue: str  # the ClusterQueue of its last admission
    request: dict[str, int]
    ended_at: float | None = None


@dataclass(slots=True)
class QueueWaits:
    """The workloads of one ClusterQueue that have not ended, by clock: aged ones by their
    clock, waiting ones without a clock yet by the start of their wait (their clock-to-be).
    The first ``i`` of them together are ``Earlier(totals[i], None, i)``."""

    keys: list[tuple[float, str]] = field(default_factory=list)  # (clock, uid), sorted
    totals: list[dict[str, int]] = field(default_factory=list)  # request sums of the first i
    # Aged workloads that ended (each matters while a later clock waits), by clock.
    ended_keys: list[tuple[float, str]] = field(default_factory=list)
    ended: list[Earlier] = field(default_factory=list)

    def before(self, clock: tuple[float, str]) -> list[Earlier]:
        """Everything of this ClusterQueue that goes before ``clock``."""
        ahead = bisect_left(self.keys, clock)
        earlier = self.ended[: bisect_left(self.ended_keys, clock)]
        return [*earlier, Earlier(self.totals[ahead], None, ahead)] if ahead else earlier


class Known(Protocol):
    """What the book reads of a workload the service knows (its WorkloadRecord)."""

    @property
    def pod_sets(self) -> list[PodSet]: ...

    @property
    def finished(self) -> bool: ...


class AgeingBook:
    FOLDED: ClassVar[frozenset[type]] = _FOLDED  # what apply reads; it passes any other by

    def __init__(self, known: Mapping[str, Known] | None = None) -> None:
        """``known``: the service's records by uid, which hold each workload's pod sets
        already; without it (a book on its own), the book keeps each request itself."""
        self._known = known
        self._requests: dict[str, dict[str, int]] = {}  # uid -> its whole request
        # The request of each distinct pod sets list (the interner shares them), with it.
        self._of_pod_sets: dict[int, tuple[list[PodSet], dict[str, int]]] = {}
        # One dict per distinct request, shared by the workloads asking it (read-only).
        self._distinct: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
        self._queue: dict[str, str] = {}  # uid -> ClusterQueue of its last admission
        self._waiting_since: dict[str, float] = {}  # uid -> its last eviction (waiting_since)
        self.aged: dict[str, Aged] = {}  # uid -> ageing facts, kept after it ends
        # For _forget_ended: the clocks not ended by their start, the ended ones by their end.
        self._running_clocks: list[tuple[float, int, Aged]] = []
        self._ended_clocks: list[tuple[float, int, str, Aged]] = []
        self._order = itertools.count()  # ties broken by arrival, never by comparing records

    def request(self, uid: str) -> dict[str, int]:
        """A workload's whole request; {} unknown or ended (finished, deleted)."""
        if self._known is None:
            return self._requests.get(uid, {})
        known = self._known.get(uid)
        if known is None or known.finished:
            return {}
        pod_sets = known.pod_sets
        of = self._of_pod_sets
        found = of.get(id(pod_sets))
        if found is None:
            found = kept_once(of, id(pod_sets), lambda: (pod_sets, self._request_of(pod_sets)))
        return found[1]

    def _request_of(self, pod_sets: list[PodSet]) -> dict[str, int]:
        """One dict per distinct request, shared by the workloads asking it (read-only)."""
        request = request_of(pod_sets)
        return kept_once(self._distinct, tuple(request.items()), lambda: request)

    def apply(self, event: AnyEvent) -> None:
        """Fold one event; idempotent."""
        if type(event) not in _FOLDED:  # one set lookup for every other event
            return
        uid = event.workload.uid
        # By exact type: an isinstance miss against a msgspec class costs more (pods_ready.py).
        if type(event) is WorkloadSubmitted:
            if self._known is None and uid not in self._requests:
                self._requests[uid] = self._request_of(event.pod_sets)
        elif type(event) is WorkloadAdmitted:
            self._queue[uid] = event.cluster_queue
            if uid in self.aged:
                self.aged[uid].queue = event.cluster_queue
        elif type(event) is WorkloadEvicted:
            self._waiting_since[uid] = event.time.timestamp()
        elif type(event) is PriorityBoosted and event.since is not None and uid not in self.aged:
            clock = Aged(
                since=event.since.timestamp(),
                queue=self._queue.get(uid, ""),
                request=self.request(uid),
            )
            self.aged[uid] = clock
            heapq.heappush(self._running_clocks, (clock.since, next(self._order), clock))
        elif type(event) is WorkloadFinished or type(event) is WorkloadDeleted:
            self._requests.pop(uid, None)
            self._queue.pop(uid, None)
            self._waiting_since.pop(uid, None)
            aged = self.aged.get(uid)
            if aged is not None and aged.ended_at is None:
                aged.ended_at = at = event.time.timestamp()
                heapq.heappush(self._ended_clocks, (at, next(self._order), uid, aged))
                self._forget_ended()

    def _forget_ended(self) -> None:
        """An ended workload matters to later clocks only while it ended after one of them
        started (before that, it was gone before their reservations could begin)."""
        running = self._running_clocks
        while running and running[0][2].ended_at is not None:
            heapq.heappop(running)
        oldest = running[0][0] if running else float("inf")
        ended = self._ended_clocks
        while ended and ended[0][0] <= oldest:
            _, _, uid, aged = heapq.heappop(ended)
            if self.aged.get(uid) is aged:
                del self.aged[uid]

    def waiting_since(self, view: WorkloadView) -> float:
        """When the workload's current wait began: its last eviction, else its queue time,
        which is its creation until it is first evicted (so a million workloads that were
        never evicted keep no entry here)."""
        return self._waiting_since.get(view.ref.uid, view.queue_time)

    def waits(self, views: Iterable[WorkloadView]) -> dict[str, QueueWaits]:
        """Per ClusterQueue, its aged workloads that have not ended and its pending workloads
        without an ageing clock (``QueueWaits``), from every pending view. An aged workload
        never admitted learns its ClusterQueue here."""
        keyed: dict[str, list[tuple[float, str]]] = {}
        for view in views:
            if view.state != "pending":
                continue
            aged = self.aged.get(view.ref.uid)
            if aged is not None:
                aged.queue = aged.queue or view.cluster_queue
                continue
            key = (self.waiting_since(view), view.ref.uid)
            keyed.setdefault(view.cluster_queue, []).append(key)
        ended: dict[str, list[tuple[float, str]]] = {}
        for uid, aged in self.aged.items():
            if aged.queue:
                book = keyed if aged.ended_at is None else ended
                book.setdefault(aged.queue, []).append((aged.since, uid))
        result: dict[str, QueueWaits] = {}
        for queue, keys in keyed.items():
            keys.sort()
            totals: list[dict[str, int]] = [{}]
            for _, uid in keys:
                total = dict(totals[-1])
                aged = self.aged.get(uid)
                request = aged.request if aged is not None else self.request(uid)
                for resource, value in request.items():
                    total[resource] = total.get(resource, 0) + value
                totals.append(total)
            result[queue] = QueueWaits(keys, totals)
        for queue, keys in ended.items():
            keys.sort()
            waits = result.setdefault(queue, QueueWaits([], [{}]))
            waits.ended_keys = keys
            waits.ended = [Earlier(self.aged[u].request, self.aged[u].ended_at) for _, u in keys]
        return result

    def bound(
        self,
        view: WorkloadView,
        *,
        policies: Iterable[ClusterQueuePolicy],
        facts: QueueFacts | None,
        blocked: str = "",
        waits: Mapping[str, QueueWaits],
    ) -> Bound | None:
        """The bound of a pending workload (None for any other): ``shared.starvation.runs_by``
        with this book's facts; ``facts`` are its ClusterQueue's (None: unknown), ``blocked``
        says why admission cannot admit it at all, ``waits`` are ``self.waits`` of every
        pending view."""
        if view.state != "pending":
            return None
        uid = view.ref.uid
        aged = self.aged.get(uid)
        if facts is None:
            facts = QueueFacts(view.cluster_queue, {}, {}, {}, preempts=False)
            blocked = blocked or view.message or "its ClusterQueue is unknown"
        waiting_since = self.waiting_since(view)
        clock = (waiting_since if aged is None else aged.since, uid)
        queue_waits = waits.get(view.cluster_queue)
        earlier = [] if queue_waits is None else queue_waits.before(clock)
        waiting = Waiting(
            queue=facts,
            request=aged.request if aged is not None else self.request(uid),
            since=None if aged is None else aged.since,
            waiting_since=waiting_since,
            earlier=earlier,
            blocked=blocked,
        )
        return runs_by(policy_for(policies, view.cluster_queue), waiting)


def queues_of(cluster_queues: Iterable[ClusterQueue]) -> dict[str, QueueFacts]:
    return {cq.metadata.name: queue_facts(cq) for cq in cluster_queues}
