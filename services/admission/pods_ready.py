"""Kueue's waitForPodsReady: a workload whose pods are not all ready within the timeout after
its admission is evicted (reason ``PodsReadyTimeout``) and requeued after a backoff, up to the
requeue limit; past it, it is deactivated (KEP-1282, docs/admission-checks.md).

Each rule is one function: :func:`backoff_seconds` (how long a requeued workload waits),
:func:`after_timeout` (requeue or deactivate). :class:`PodsReadyClock` keeps, from events
only, when each admitted workload was admitted and whether its pods are ready, so a replay
after a restart rebuilds the same clocks; its own eviction events count the requeues.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

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
    "PodsReadyClock",
    "after_timeout",
    "backoff_seconds",
]

REASON = "PodsReadyTimeout"
LIMIT_REASON = "RequeuingLimitExceeded"
JITTER = 0.0001  # Kueue's: every wait is stretched by up to this fraction at random


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


class PodsReadyClock:
    """Admitted workloads whose pods are not ready yet, and their requeue counts.

    Only the workloads still waiting are kept (:attr:`waiting`): one whose pods are ready,
    or whose eviction was decided, has nothing more to time out. Their deadlines are a heap
    ordered by admission time, so each turn of the loop looks only at those that are due.
    """

    def __init__(self) -> None:
        self.settings = WaitForPodsReady()
        self.timeout = parse_duration(self.settings.timeout)
        self.waiting: dict[str, _Admitted] = {}
        self.generations: dict[str, int] = {}  # uid -> its latest admission seen
        self.deadlines: list[tuple[float, str, int]] = []  # (admitted at, uid, generation)
        # uid -> the generations evicted for PodsReadyTimeout with a requeue (a set, so that
        # a redelivered eviction counts once): its requeue count is their number.
        self.requeued: dict[str, set[int]] = {}
        self.random = random.Random()

    def configure(self, settings: WaitForPodsReady | None) -> None:
        self.settings = settings or WaitForPodsReady()
        self.timeout = parse_duration(self.settings.timeout)

    @property
    def enabled(self) -> bool:
        return self.settings.enable

    def apply(self, event: AnyEvent) -> float | None:
        """Fold one event; idempotent (a redelivered event finds its work done). For the
        PodsReady of a workload still waiting, returns when it was admitted (its metrics)."""
        uid = event.workload.uid
        current = self.waiting.get(uid)
        match event:
            case WorkloadAdmitted() if not event.reserved_only:
                # Admitted (not only reserved): the pods may start, the clock starts.
                if self.generations.get(uid, 0) < event.generation:
                    self.generations[uid] = event.generation
                    at = event.time.timestamp()
                    self.waiting[uid] = _Admitted(
                        event.workload, event.cluster_queue, event.generation, at
                    )
                    heapq.heappush(self.deadlines, (at, uid, event.generation))
            case WorkloadPodsReady() | EvictionRequested():
                if current is not None and current.generation == event.generation:
                    del self.waiting[uid]  # ready, or leaving: nothing left to time out
                    if isinstance(event, WorkloadPodsReady):
                        return current.at
                if (
                    isinstance(event, EvictionRequested)
                    and event.reason == REASON
                    and event.requeue_at is not None
                ):
                    self.requeued.setdefault(uid, set()).add(event.generation)
            case WorkloadEvicted() | WorkloadFinished():
                if current is not None and current.generation == event.generation:
                    del self.waiting[uid]
            case WorkloadDeleted():
                self.waiting.pop(uid, None)
                self.generations.pop(uid, None)
                self.requeued.pop(uid, None)
        return None

    def blocking(self) -> bool:
        """blockAdmission: whether an admitted workload still waits for its pods, so that
        nothing else may be admitted (Kueue admits one at a time until its pods are ready)."""
        if not self.enabled or not self.settings.blocks_admission:
            return False
        return bool(self.waiting)

    def due(self, now: float) -> list[EvictionRequested]:
        """Evictions for the admitted workloads whose pods are not ready ``timeout`` after
        their admission, each decided once: requeued after :func:`backoff_seconds`, or
        deactivated past the limit (:func:`after_timeout`)."""
        out: list[EvictionRequested] = []
        while self.deadlines:
            at, uid, generation = self.deadlines[0]
            run = self.waiting.get(uid)
            if run is None or run.generation != generation:
                heapq.heappop(self.deadlines)  # ready, evicted or readmitted since
                continue
            if not self.enabled or now - at < self.timeout:
                break  # the earliest one still waiting is not due: none is
            heapq.heappop(self.deadlines)
            del self.waiting[uid]  # decided once
            out.append(self._timed_out(run, now))
        return out

    def _timed_out(self, run: _Admitted, now: float) -> EvictionRequested:
        strategy = self.settings.requeuing_strategy
        uid = run.ref.uid
        requeues = len(self.requeued.get(uid, ()))
        message = f"Exceeded the PodsReady timeout {self.settings.timeout}"
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
        return EvictionRequested(
            id=f"podsreadytimeout-{uid}-{run.generation}",
            source="admission",
            workload=run.ref,
            cluster_queue=run.cluster_queue,
            generation=run.generation,
            reason=reason,
            message=message,
            requeue_at=requeue_at,
            deactivated=requeue_at is None,
        )
