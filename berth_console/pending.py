"""Admission's pending list of a ClusterQueue, shared by every browser showing that queue.

The ``pending`` query walks every workload admission holds, so it is asked at most once a
second per ClusterQueue, however many pages show it, and only while one does; and only for
its first page (the first ``SHOWN`` in admission order; the page gives the total from the
queue's status).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from berth_console.queries import Queries, QueryError

__all__ = ["PendingCache"]

FRESH_S = 1.0
SHOWN = 500  # one page of admission's answer


class PendingCache:
    def __init__(self, queries: Queries | None) -> None:
        self.queries = queries
        self._answers: dict[str, tuple[float, list[dict[str, Any]] | QueryError]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, cluster_queue: str) -> list[dict[str, Any]]:
        """Pending workloads in admission order; raises :class:`QueryError`."""
        if self.queries is None:
            raise QueryError("no bus connection")
        lock = self._locks.setdefault(cluster_queue, asyncio.Lock())
        async with lock:  # one question in flight per queue; the others take its answer
            cached = self._answers.get(cluster_queue)
            if cached is None or time.monotonic() - cached[0] >= FRESH_S:
                try:
                    body = await self.queries.ask(
                        "admission",
                        "pending",
                        {"clusterQueue": cluster_queue, "offset": 0, "limit": SHOWN},
                    )
                    answer: list[dict[str, Any]] | QueryError = body["items"]
                except QueryError as error:
                    answer = error
                cached = (time.monotonic(), answer)
                self._answers[cluster_queue] = cached
        if isinstance(cached[1], QueryError):
            raise cached[1]
        return cached[1]
