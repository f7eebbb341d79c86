"""Kubernetes Events, sent as client-go's recorder sends them: from a queue, at their own rate.

controller-runtime gives an event recorder a client of its own, built from the manager's
settings, so Kueue's Events have a token bucket of their own (20 a second, bursts of 30)
beside the one its status writes use, and client-go sends them from a queue in the
background: a Workload's status is never held up behind the Events about it, and when the
queue is full (1000 Events) a new one is dropped rather than waited for. Berth does the same:
the status is the truth (``kubectl get workloads``), an Event is a best-effort note.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import KubeError
from shared.logging import get_logger

__all__ = ["EVENTS", "QUEUED_EVENTS", "EventRecorder", "TokenBucket"]

log = get_logger("watcher.kube.status")

EVENTS = Resource("", "v1", "events", "Event")
QUEUED_EVENTS = 1000  # client-go's maxQueuedEvents
DROPS_LOGGED_EVERY = 1000  # a full queue drops many: the first drop and every 1000th are logged

Obj = dict[str, Any]


class TokenBucket:
    """At most ``qps`` acquisitions a second on average, ``burst`` at once (client-go's
    token bucket: a full bucket lets a burst through, then one every 1/qps seconds)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.stamp = time.monotonic()

    async def acquire(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.qps)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.qps)


class EventRecorder:
    def __init__(
        self, client: KubeClient, *, qps: float, burst: int, queued: int = QUEUED_EVENTS
    ) -> None:
        self.client = client
        self.limiter = TokenBucket(qps, burst)
        self.queue: asyncio.Queue[tuple[str, Obj]] = asyncio.Queue(maxsize=queued)
        self.sent = 0  # Events the server took (the benchmark reads these)
        self.dropped = 0

    def record(self, namespace: str, event: Obj) -> None:
        """Queue an Event for ``namespace``; dropped if the queue is full."""
        try:
            self.queue.put_nowait((namespace, event))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped % DROPS_LOGGED_EVERY == 1:
                log.warning(
                    "kueue_event_dropped",
                    reason=f"{self.queue.maxsize} Events queued already",
                    dropped=self.dropped,
                    event=event.get("reason"),
                )

    async def run(self) -> None:
        """Send queued Events for ever, at the limiter's pace; a refused one is logged."""
        while True:
            namespace, event = await self.queue.get()
            await self.limiter.acquire()
            try:
                await self.client.create(EVENTS, namespace=namespace, body=event)
                self.sent += 1
            except KubeError as error:
                involved = event.get("involvedObject") or {}
                log.warning(
                    "kueue_event_failed",
                    workload=f"{namespace}/{involved.get('name')}",
                    event=event.get("reason"),
                    reason=str(error),
                )
