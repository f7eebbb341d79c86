"""The local backend's status records: the ``berth-status`` bucket.

What runs is recorded there (phase, generation, pids; under the object's key, with its
uid), so a restarted watcher knows what its predecessor started. Status lives apart from the
objects, like Kubernetes' status subresource: writing it rewrites no object, and the objects'
watch does not echo it back. Only the active watcher writes it, so no compare-and-swap.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.js.kv import KeyValue

from shared.bus import AckTimeout, Bus, BusError, KeyBatch, KeyUpdates
from shared.logging import get_logger

__all__ = ["StatusStore", "StatusWrites"]

log = get_logger("watcher.local")

_encode = msgspec.json.Encoder().encode



class StatusWrites:
    """Status writes in flight: (key, encoded status) and their acks to come."""

    def __init__(self) -> None:
        self.values: list[tuple[str, bytes]] = []
        self.sent: KeyBatch | KeyUpdates | None = None


class StatusStore:
    """Each object's newest status, in memory and in the bucket.

    ``objects`` is the backend's own map of bucket key -> object (read, never written here):
    a status is written only for an object that still exists, stamped with its uid.
    """

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.statuses: dict[str, dict[str, Any]] = {}  # bucket key -> status (with "uid")
        self.kv: KeyValue | None = None
        self.bus: Bus | None = None
        self.stopping = asyncio.Event()  # replaced by the runtime's in :meth:`open`

    def open(self, bus: Bus, kv: KeyValue, stopping: asyncio.Event) -> None:
        self.bus, self.kv, self.stopping = bus, kv, stopping

    def of(self, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """The recorded status of this object (not of an older one of the same name)."""
        status = self.statuses.get(key)
        return status if status is not None and status.get("uid") == obj["metadata"]["uid"] else {}

    async def set(self, key: str, status: dict[str, Any]) -> None:
        await self.settle(await self.send([(key, status)]))

    async def send(self, updates: list[tuple[str, dict[str, Any]]]) -> StatusWrites:
        """Record statuses, all in flight at once; :meth:`settle` awaits them.

        Only this process writes them, so no compare-and-swap: an object deleted meanwhile
        gets none (a write that races its deletion is dropped at the next start). Plain puts
        need no ack each: they go as fast batches, one ack for all (``send_key_batch``).
        """
        assert self.bus is not None and self.kv is not None
        writes = StatusWrites()
        updated = datetime.now(UTC).isoformat()  # one moment for the statuses sent together
        objects, statuses, of = self.objects, self.statuses, self.of
        values = writes.values
        for key, change in updates:
            obj = objects.get(key)
            if obj is None:
                continue
            status = {**of(key, obj), **change}
            status["uid"] = obj["metadata"]["uid"]
            status["updated"] = updated
            statuses[key] = status
            value = _encode(status)
            values.append((key, value))
        writes.sent = await self.bus.send_key_batch(self.kv, values)
        return writes

    async def settle(self, writes: StatusWrites) -> None:
        """Wait for the writes' outcomes. A write not known to be stored is written again
        with the key's newest status (never an older one), so it may be stored twice but is
        never lost; a write's own refusal (``BusError``) fails the round."""
        outcomes = [] if writes.sent is None else await writes.sent.outcomes()
        unstored: list[str] = []
        for (key, _), outcome in zip(writes.values, outcomes, strict=True):
            if isinstance(outcome, AckTimeout):
                unstored.append(key)
            elif isinstance(outcome, Exception):
                raise outcome
        await self._rewrite(unstored)

    async def _rewrite(self, keys: list[str]) -> None:
        """Write these keys' newest statuses until each is stored, all together each round,
        with a back-off between rounds; a key forgotten meanwhile is dropped. Why together:
        one put dropped mid-batch leaves the rest of its batch unstored, and one round trip
        each would hold the events' ack that long. Why retry whatever the failure: while a
        NATS cluster elects the status bucket's leader (a node killed) a write is refused
        for seconds; raising failed the finish round and stopped the service, and the runs
        it held were then reported by nobody (bench/failover.py). Stopping ends the
        retries (the last failure is raised)."""
        assert self.bus is not None and self.kv is not None
        delay = 0.1
        keys = list(dict.fromkeys(keys))
        while keys := [key for key in keys if key in self.statuses]:
            values = [(key, _encode(self.statuses[key])) for key in keys]
            try:
                outcomes = await (await self.bus.send_key_batch(self.kv, values)).outcomes()
            except BusError as error:
                failure: Exception = error
            else:
                failed = [
                    (key, outcome)
                    for key, outcome in zip(keys, outcomes, strict=True)
                    if isinstance(outcome, Exception)
                ]
                if not failed:
                    return
                keys, failure = [key for key, _ in failed], failed[0][1]
            if self.stopping.is_set():
                raise failure
            log.warning("status_write_retry", count=len(keys), key=keys[0], error=repr(failure))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def forget(self, key: str) -> None:
        assert self.kv is not None
        if self.statuses.pop(key, None) is not None:
            await self.kv.delete(key)
