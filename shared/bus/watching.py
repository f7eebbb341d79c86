"""Key-value buckets followed as a list+watch (:class:`BucketWatch`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from nats.js.kv import KeyValue

from shared.bus.buckets import Bucket
from shared.bus.errors import translated
from shared.bus.keywatch import WATCH_QUEUE, KeyWatch

__all__ = ["WATCH_BATCH", "WATCH_IDLE_TIMEOUT_S", "BucketWatch", "live_value"]

WATCH_BATCH = 2048  # a batch handed to a follow_batches handler holds at most this many
# (all that came during a pause of its handler, up to its watch's queue: caught up in one round)
WATCH_IDLE_TIMEOUT_S = 0.5  # a follow loop looks at its stop flag at least this often


class BucketWatch:
    """A key-value bucket followed as a list+watch: the current entries, then each change."""

    def __init__(self, watcher: KeyWatch) -> None:
        self._watcher = watcher

    @classmethod
    async def snapshot(cls, kv: KeyValue) -> list[KeyValue.Entry]:
        """Every entry that exists now (a watch, stopped once the initial values are in:
        unlike ``kv.keys()``, it cannot end early while keys change)."""
        watch, entries = await cls.start(kv)
        await watch._watcher.stop()
        return entries

    @classmethod
    async def start(
        cls, kv: KeyValue, *, queue: int = WATCH_QUEUE
    ) -> tuple[BucketWatch, list[KeyValue.Entry]]:
        """Begin watching a bucket opened by ``Bus.kv``; returns the watch and every entry
        that exists now. ``queue``: how many changes may wait for the follow loop (a full
        queue slows the server's delivery), as many as its handler takes in one round."""
        if not isinstance(kv, Bucket):
            raise TypeError(f"watch a bucket opened by Bus.kv, not {type(kv).__name__}")
        watcher = KeyWatch(kv, queue=queue)
        with translated():
            await watcher.start()
        initial: list[KeyValue.Entry] = []
        try:
            while (entry := await watcher.queue.get()) is not None:  # None: initial ones done
                initial.append(entry)
        except BaseException:
            await watcher.stop()
            raise
        return cls(watcher), initial

    async def stop(self) -> None:
        """End the watch (a follow loop ends it too); once is enough, twice is harmless."""
        await self._watcher.stop()

    async def follow(
        self, handle: Callable[[KeyValue.Entry], Awaitable[None]], *, stopping: asyncio.Event
    ) -> None:
        """Hand each change to ``handle`` until ``stopping`` is set; then stop the watch."""
        async with self._following(stopping):
            while not stopping.is_set():
                try:
                    entry = await self._watcher.next(wait=WATCH_IDLE_TIMEOUT_S)
                except TimeoutError:
                    continue
                if entry is not None:
                    await handle(entry)

    async def follow_batches(
        self,
        handle: Callable[[list[KeyValue.Entry]], Awaitable[None]],
        *,
        stopping: asyncio.Event,
    ) -> None:
        """Like :meth:`follow`, handing over every change that has arrived as one list (in
        order, at most :data:`WATCH_BATCH`), so a busy bucket costs one wake-up per batch, not
        per entry: the handler can pipeline its work."""
        queue = self._watcher.queue
        async with self._following(stopping):
            while not stopping.is_set():
                try:
                    first = await self._watcher.next(wait=WATCH_IDLE_TIMEOUT_S)
                except TimeoutError:
                    continue
                batch = [] if first is None else [first]
                while len(batch) < WATCH_BATCH:
                    try:
                        entry = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        break
                    if entry is not None:
                        batch.append(entry)
                if batch:
                    await handle(batch)

    @contextlib.asynccontextmanager
    async def _following(self, stopping: asyncio.Event) -> AsyncIterator[None]:
        """Around a follow loop: wake it once ``stopping`` is set (it ends now rather than at
        the end of its idle timeout); afterwards, stop the watch."""
        waking = asyncio.create_task(_wake_on_stop(self._watcher, stopping))
        try:
            yield
        finally:
            waking.cancel()
            await asyncio.gather(waking, return_exceptions=True)
            await self._watcher.stop()


async def _wake_on_stop(watcher: KeyWatch, stopping: asyncio.Event) -> None:
    """Once ``stopping`` is set, put None (the "no entry" marker, which the follow loops
    skip) in the watch's queue: a loop waiting for its next entry wakes up."""
    await stopping.wait()
    with contextlib.suppress(asyncio.QueueFull):  # full: the loop has entries, it is awake
        watcher.queue.put_nowait(None)


def live_value(entry: KeyValue.Entry) -> bytes | None:
    """An entry's value, or None when the entry records a deletion."""
    if entry.operation in ("DEL", "PURGE") or not entry.value:
        return None
    return entry.value
