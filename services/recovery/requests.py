"""What recovery's API (``berth.api.recovery.launch|cancel``) is sent, and the managed jobs'
ids: sequential, taken by compare-and-swap in the ``berth-jobs`` bucket."""

from __future__ import annotations

from typing import Any

import msgspec
from nats.js.kv import KeyValue

from shared.bus import KeyExists, KeyNotFound
from shared.jobs import NEXT_ID_KEY

__all__ = ["CancelRequest", "LaunchRequest", "LaunchTask", "next_id"]


class LaunchTask(msgspec.Struct, rename="camel"):
    """One task of a pipeline, in order."""

    name: str
    template: dict[str, Any]
    resources: str
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: list[int] = []


class LaunchRequest(msgspec.Struct, rename="camel"):
    name: str
    namespace: str
    template: dict[str, Any]
    resources: str
    queue_name: str = ""
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: list[int] = []
    tasks: list[LaunchTask] = []  # a pipeline's tasks (the first is also the fields above)


class CancelRequest(msgspec.Struct, rename="camel"):
    id: int | None = None
    name: str | None = None


async def next_id(kv: KeyValue) -> int:
    """Sequential ids (1, 2, ...) via compare-and-swap, safe against a second replica."""
    while True:
        try:
            entry = await kv.get(NEXT_ID_KEY)
            current = int(entry.value or b"1")
            await kv.update(NEXT_ID_KEY, str(current + 1).encode(), last=entry.revision)
            return current
        except KeyNotFound:
            try:
                await kv.create(NEXT_ID_KEY, b"2")
                return 1
            except KeyExists:
                continue
        except KeyExists:
            continue
