"""Namespaces with a LocalQueue named ``default``: their unlabelled workloads are Berth's too.

Kueue's ``manageJobsWithoutQueueName`` in its namespaced form: a Job without the
``kueue.x-k8s.io/queue-name`` label is queued to ``default`` when its namespace has a
LocalQueue of that name. The config bucket (``localqueue.<namespace>.default``) says which
namespaces do, whether the queue came from ``berth apply`` or from the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nats.js.kv import KeyValue

from shared.bus import BucketWatch

__all__ = ["DefaultQueues"]


class DefaultQueues:
    def __init__(self) -> None:
        self.namespaces: set[str] = set()

    def note(self, entry: KeyValue.Entry) -> str | None:
        """Track namespaces with a LocalQueue named ``default``; returns one that gained it."""
        parts = entry.key.split(".")
        if len(parts) != 3 or parts[0] != "localqueue" or parts[2] != "default":
            return None
        namespace = parts[1]
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            self.namespaces.discard(namespace)
            return None
        if namespace in self.namespaces:
            return None
        self.namespaces.add(namespace)
        return namespace

    async def follow(
        self,
        queues: BucketWatch,
        gained: Callable[[str], Awaitable[None]],
        *,
        stopping: asyncio.Event,
    ) -> None:
        """Follow the config bucket's changes until ``stopping``; ``gained(namespace)`` when
        a namespace gains its default LocalQueue."""

        async def handle(entry: KeyValue.Entry) -> None:
            namespace = self.note(entry)
            if namespace is not None:
                await gained(namespace)

        await queues.follow(handle, stopping=stopping)
