"""Kueue's waitForPodsReady: a workload whose pods are not all ready within the timeout after
its admission, or not ready again within ``recoveryTimeout`` after they lost readiness, is
evicted (reason ``PodsReadyTimeout``) and requeued after a backoff, up to the requeue limit;
past it, it is deactivated (KEP-1282, docs/admission-checks.md). A requeued workload queues by
its eviction time (``requeuingStrategy.timestamp: Eviction``, Kueue's default) or by its
creation (``Creation``).

Each rule is one function: :func:`backoff_seconds` (how long a requeued workload waits),
:func:`after_timeout` (requeue or deactivate), :func:`recovery_seconds` (the recovery timeout
in force), :func:`not_ready_timeout` (which clock runs and how long it has left) and
:func:`queue_order_time` (the time a requeued workload queues by). :class:`PodsReadyClock`
keeps, from events only, when each admitted workload was admitted, whether its pods are
ready or since when they lost readiness, and how it was last evicted, so a replay after a
restart rebuilds the same clocks; its own eviction events count the requeues.
"""

from __future__ import annotations

import heapq
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from services.admission.evictions import eviction as evict
from shared.admission_checks import WaitForPodsReady
from shared.durations import parse_duration
from shared.events import (
    AnyEvent,
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPodsReady,
    WorkloadRef,
)

__all__ = [
    "JITTER",
    "REASON",
    "WAIT_FOR_RECOVERY",
    "WAIT_FOR_START",
    "PodsReadyClock",
    "after_timeout",
    "backoff_seconds",
    "not_ready_timeout",
    "queue_order_time",
    "recovery_seconds",
]

REASON = "PodsReadyTimeout"
LIMIT_REASON = "RequeuingLimitExceeded"
JITTER = 0.0001  # Kueue's: every wait is stretched by up to this fraction at random
# Kueue's PodsReady=False reasons, also the eviction's underlying cause (its ``detail``).
Cause = Literal["WaitForStart", "WaitForRecovery"]
WAIT_FOR_START: Cause = "WaitForStart"
WAIT_FOR_RECOVERY: Cause = "WaitForRecovery"
# Kueue's WorkloadEvictedByAdmissionCheck (admission_checks.REASON; that module imports this one).
CHECK_REASON = "AdmissionCheck"
# What PodsReadyClock.apply folds (events are never subclassed: exact types).
_FOLDED = frozenset(
    {
        WorkloadAdmitted,
        WorkloadPodsReady,
        EvictionRequested,
        WorkloadEvicted,
        WorkloadFinished,
        WorkloadDeleted,
    }
)


def recovery_seconds(settings: WaitForPodsReady) -> float | None:
    """The recovery timeout in force: ``recoveryTimeout``, or when it is not set the
    ``timeout`` (Kueue's default since v0.16); ``0s`` turns it off (None), as in Kueue."""
    text = settings.recovery_timeout if settings.recovery_timeout is not None else settings.timeout
    seconds = parse_duration(text)
    return seconds if seconds > 0 else None


def not_ready_timeout(
    *,
    admitted_at: float | None,
    ready: bool,
    lost_at: float | None,
    timeout: float | None,
    recovery: float | None,
    now: float,
) -> tuple[Cause, float] | None:
    """Which clock runs for an admitted workload whose pods are not ready, and the seconds it
    has left (0: due); None when none runs (Kueue's ``admittedNotReadyWorkload``).

    Not admitted (``admitted_at`` None), ready, or waitForPodsReady off (``timeout`` None):
    no clock. Pods that never were ready: ``WaitForStart``, ``timeout`` after the admission.
    Pods that were ready and lost readiness at ``lost_at``: ``WaitForRecovery``,
    ``recovery`` after that, and no clock when the recovery timeout is off.
    """
    if admitted_at is None or ready or timeout is None:
        return None
    if lost_at is None:
        return WAIT_FOR_START, max(timeout - (now - admitted_at), 0.0)
    if recovery is None:
        return None
    return WAIT_FOR_RECOVERY, max(recovery - (now - lost_at), 0.0)


def queue_order_time(created: float, eviction: tuple[str, float] | None, timestamp: str) -> float:
    """The time a workload queues by (Kueue's ``GetQueueOrderTimestamp``): its creation,
    unless its last eviction (``(reason, when)``, None if not evicted since its last
    admission) was a pods-ready timeout under ``requeuingStrategy.timestamp: Eviction``, or
    an admission check's (whatever the timestamp): then that eviction's time, so it queues
    behind the workloads already waiting."""
    if eviction is not None:
        reason, at = eviction
        if (reason == REASON and timestamp == "Eviction") or reason == CHECK_REASON:
            return at
    return created


def backoff_seconds(count: int, *, base: float, cap: float, draw: float) -> float:
    """How long the ``count``-th requeue (1, 2, ...) waits: Kueue's ``base * 2^(count-1)``,
    at most ``cap``, stretched by ``draw`` (in [0, 1)) times :data:`JITTER`.

    Kueue computes it with a Kubernetes ``wait.Backoff`` (factor 2, jitter 0.0001) stepped
    ``count`` times; the first requeue waits ``base``. A cap of 0 means no cap.
    """
    if count < 1:
        return 0.0
    wait = base * 2.0 ** min(count - 1, 62)
    if cap > 0:
        wait = min(wait, cap)
    return wait * (1.0 + JITTER * draw)


def after_timeout(requeues: int, limit: int | None) -> Literal["requeue", "deactivate"]:
    """What a pods-ready timeout does to a workload already requeued ``requeues`` times for
    it: requeue it again, unless that would exceed ``backoffLimitCount`` (None: no limit),
    then deactivate it (Kueue's ``RequeuingLimitExceeded``)."""
    if limit is not None and requeues + 1 > limit:
        return "deactivate"
    return "requeue"


@dataclass(slots=True)
class _Admitted:
    ref: WorkloadRef
    cluster_queue: str
    generation: int
    at: float  # when it was admitted (and may start), epoch seconds
    lost_at: float | None = None  # when its pods, once all ready, lost readiness
    # When waitForPodsReady was turned on, for a run admitted while it was off: no clock
    # started earlier (PodsReadyClock._clocks).
    timed_from: float = 0.0

    @property
    def cause(self) -> Cause:
        return WAIT_FOR_START if self.lost_at is None else WAIT_FOR_RECOVERY

    @property
    def since(self) -> float:
        """When its running clock started: the admission, or the loss of readiness, or the
        moment the setting was turned on if that is later."""
        return max(self.at if self.lost_at is None else self.lost_at, self.timed_from)


class PodsReadyClock:
    """Admitted workloads whose pods are not ready, those whose pods are, their requeue
    counts and their last evictions.

    A workload whose pods are not ready is in :attr:`waiting` (never ready yet, or ready and
    then not: recovering); one whose pods are ready is in :attr:`ready` (so that a loss of
    readiness can start its recovery clock); one whose eviction was decided is in neither.
    Deadlines are two heaps, one per clock (start and recovery), each ordered by the time its
    clock started, so each turn of the loop looks only at those that are due.
    """

    def __init__(self) -> None:
        self.settings = WaitForPodsReady()
        self.timeout = parse_duration(self.settings.timeout)
        self.recovery: float | None = recovery_seconds(self.settings)
        self.waiting: dict[str, _Admitted] = {}
        self.ready: dict[str, _Admitted] = {}
        self.generations: dict[str, int] = {}  # uid -> its latest admission seen
        # (clock started at, uid, generation): WaitForStart, and WaitForRecovery; kept only
        # while the clocks run (_clocks).
        self.deadlines: list[tuple[float, str, int]] = []
        self.recoveries: list[tuple[float, str, int]] = []
        self.timing = self.settings.enable  # waitForPodsReady is on: the heaps are kept
        # uid -> the generations evicted for PodsReadyTimeout with a requeue (a set, so that
        # a redelivered eviction counts once): its requeue count is their number.
        self.requeued: dict[str, set[int]] = {}
        # uid -> (reason, when, generation) of its last eviction since its last admission
        # (Kueue's Evicted condition while True): what queue_order_time reads.
        self.evictions: dict[str, tuple[str, float, int]] = {}
        self.random = random.Random()

    def configure(self, settings: WaitForPodsReady | None, now: float | None = None) -> None:
        """Take the settings in force; ``now`` (epoch seconds, default the clock's) is when,
        for the runs admitted while the setting was off (:meth:`_clocks`)."""
        self.settings = settings or WaitForPodsReady()
        self.timeout = parse_duration(self.settings.timeout)
        self.recovery = recovery_seconds(self.settings)
        self._clocks(time.time() if now is None else now)

    def _clocks(self, now: float) -> None:
        """The deadline heaps are kept only while waitForPodsReady is enabled: disabled,
        :meth:`due` times nothing out (no timeout), so an entry per admission pushed and
        popped was work for nothing. Enabled (again), they are made from :attr:`waiting`,
        which is kept either way: one entry per run whose clock runs, as the pushes of
        :meth:`apply` would have left once their stale entries were popped (due reads only
        entries that match a waiting run).

        The rule for the runs admitted while it was off: their clocks start when it is
        turned on (``now``), not at their admission. The watcher reported no readiness
        while it was off, and sends it once it sees the setting
        (services/watcher/pods_ready_gate.py); timed from their admission, ready runs would
        be evicted before that report is read."""
        if self.enabled and not self.timing:
            for run in self.waiting.values():
                run.timed_from = now
        self.timing = self.enabled
        runs = self.waiting.items() if self.timing else ()
        self.deadlines = [(r.since, uid, r.generation) for uid, r in runs if r.lost_at is None]
        self.recoveries = [(r.since, uid, r.generation) for uid, r in runs if r.lost_at is not None]
        heapq.heapify(self.deadlines)
        heapq.heapify(self.recoveries)

    @property
    def enabled(self) -> bool:
        return self.settings.enable

    def apply(self, event: AnyEvent) -> float | None:
        """Fold one event; idempotent (a redelivered event finds its work done). For the
        first PodsReady of an admission, returns when it was admitted (its metrics)."""
        if type(event) not in _FOLDED:  # one set lookup for every other event
            return None
        uid = event.workload.uid
        current = self.waiting.get(uid)
        # By exact type, not class patterns: an isinstance miss against a msgspec class costs
        # more than these checks (events are never subclassed).
        if type(event) is WorkloadAdmitted:
            # Admitted (not only reserved): the pods may start, the clock starts.
            if not event.reserved_only and self.generations.get(uid, 0) < event.generation:
                self.generations[uid] = event.generation
                at = event.time.timestamp()
                self.waiting[uid] = _Admitted(
                    event.workload, event.cluster_queue, event.generation, at
                )
                self.ready.pop(uid, None)
                self.evictions.pop(uid, None)  # Kueue's Evicted turns False
                if self.timing:
                    heapq.heappush(self.deadlines, (at, uid, event.generation))
        elif type(event) is WorkloadPodsReady and event.ready:
            if current is not None and current.generation == event.generation:
                del self.waiting[uid]  # ready: nothing left to time out
                self.ready[uid] = current
                if current.lost_at is None:
                    return current.at
                current.lost_at = None  # recovered (Kueue's reason Recovered)
        elif type(event) is WorkloadPodsReady:  # ready: false, readiness lost
            run = self.ready.get(uid)
            if run is not None and run.generation == event.generation:
                del self.ready[uid]
                run.lost_at = event.time.timestamp()
                self.waiting[uid] = run
                if self.timing:
                    heapq.heappush(self.recoveries, (run.since, uid, run.generation))
        elif type(event) is EvictionRequested:
            self._leaving(uid, event.generation)
            self.evictions[uid] = (event.reason, event.time.timestamp(), event.generation)
            if event.reason == REASON and event.requeue_at is not None:
                self.requeued.setdefault(uid, set()).add(event.generation)
        elif type(event) is WorkloadEvicted:
            self._leaving(uid, event.generation)
            known = self.evictions.get(uid)
            if known is None or known[2] != event.generation:  # evicted unasked
                self.evictions[uid] = (event.reason, event.time.timestamp(), event.generation)
        elif type(event) is WorkloadFinished:
            self._leaving(uid, event.generation)
        elif type(event) is WorkloadDeleted:
            self.waiting.pop(uid, None)
            self.ready.pop(uid, None)
            self.generations.pop(uid, None)
            self.requeued.pop(uid, None)
            self.evictions.pop(uid, None)
        return None

    def _leaving(self, uid: str, generation: int) -> None:
        """That admission is evicted or done: it has nothing more to time out."""
        for runs in (self.waiting, self.ready):
            run = runs.get(uid)
            if run is not None and run.generation == generation:
                del runs[uid]

    def order_time(self, uid: str, created: float) -> float:
        """The time a workload requeued now queues by (:func:`queue_order_time`)."""
        eviction = self.evictions.get(uid)
        return queue_order_time(
            created,
            None if eviction is None else eviction[:2],
            self.settings.requeuing_strategy.timestamp,
        )

    def reset_requeues(self, uid: str) -> None:
        """A reactivated workload's requeue count starts again at 0 (Kueue clears its
        ``requeueState`` when it is deactivated; services/admission/activation.py)."""
        self.requeued.pop(uid, None)

    def blocking(self) -> bool:
        """blockAdmission: whether an admitted workload's pods are not ready (not yet, or not
        any more), so that nothing else may be admitted (Kueue admits one at a time until its
        pods are ready; a workload waiting for recovery is not ready either)."""
        if not self.enabled or not self.settings.blocks_admission:
            return False
        return bool(self.waiting)

    def due(self, now: float) -> list[EvictionRequested]:
        """Evictions for the admitted workloads whose pods are not ready ``timeout`` after
        their admission, or not ready again ``recoveryTimeout`` after they lost readiness
        (:func:`not_ready_timeout`), each decided once: requeued after
        :func:`backoff_seconds`, or deactivated past the limit (:func:`after_timeout`)."""
        out: list[EvictionRequested] = []
        for heap, cause in ((self.deadlines, WAIT_FOR_START), (self.recoveries, WAIT_FOR_RECOVERY)):
            while heap:
                since, uid, generation = heap[0]
                run = self.waiting.get(uid)
                if run is None or (run.generation, run.cause, run.since) != (
                    generation,
                    cause,
                    since,
                ):
                    heapq.heappop(heap)  # ready, evicted, readmitted or recovered since
                    continue
                left = not_ready_timeout(  # since: run.since, as the entry matched
                    admitted_at=since if run.lost_at is None else run.at,
                    ready=False,
                    lost_at=None if run.lost_at is None else since,
                    timeout=self.timeout if self.enabled else None,
                    recovery=self.recovery,
                    now=now,
                )
                if left is None or left[1] > 0:
                    break  # the earliest one still waiting is not due: none is
                heapq.heappop(heap)
                del self.waiting[uid]  # decided once
                out.append(self._timed_out(run, now))
        return out

    def _timed_out(self, run: _Admitted, now: float) -> EvictionRequested:
        strategy = self.settings.requeuing_strategy
        uid = run.ref.uid
        requeues = len(self.requeued.get(uid, ()))
        if run.lost_at is None:
            message = f"Exceeded the PodsReady timeout {self.settings.timeout}"
        else:
            message = (
                "Exceeded the PodsReady recovery timeout"
                f" {self.settings.recovery_timeout or self.settings.timeout}"
                " after the pods lost readiness"
            )
        requeue_at: datetime | None = None
        limit = strategy.backoff_limit_count
        if after_timeout(requeues, limit) == "deactivate":
            reason = LIMIT_REASON
            message = (
                "The workload is deactivated due to exceeding the maximum number of"
                f" re-queuing retries ({limit})"
            )
        else:
            reason = REASON
            wait = backoff_seconds(
                requeues + 1,
                base=strategy.backoff_base_seconds,
                cap=strategy.backoff_max_seconds,
                draw=self.random.random(),
            )
            requeue_at = datetime.fromtimestamp(now + wait, UTC)
            message += f"; requeued after a {wait:.0f}s backoff (requeue {requeues + 1})"
        return evict(
            "podsreadytimeout",
            run.ref,
            run.cluster_queue,
            run.generation,
            reason,
            detail=run.cause,
            message=message,
            requeue_at=requeue_at,
            deactivated=requeue_at is None,
        )
