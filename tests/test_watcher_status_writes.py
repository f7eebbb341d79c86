"""What the local watcher's status writes store (statuses.StatusStore.send), on a real bucket:
the object's recorded status merged with the change, in that key order, stamped with the
object's uid and the moment; nothing for an object that no longer exists; an older object's
status of the same name never merged in."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from services.watcher.local.statuses import StatusStore
from shared.bus import STATUS_BUCKET, Bus

# (the object under the key, if any; its status recorded before; the change; what the bucket
# holds after, but its `updated`; why)
WRITE_CASES: list[tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any], Any, str]] = [
    (
        {"metadata": {"uid": "u1"}},
        None,
        {"phase": "Running", "generation": 1, "pids": []},
        {"phase": "Running", "generation": 1, "pids": [], "uid": "u1"},
        "a first status: the change and the uid",
    ),
    (
        {"metadata": {"uid": "u1"}},
        {"phase": "Running", "generation": 1, "pids": [], "uid": "u1", "updated": "t0"},
        {
            "phase": "Succeeded",
            "generation": 1,
            "exitCode": 0,
            "message": "",
            "pids": [],
            "reported": True,
        },
        {
            "phase": "Succeeded",
            "generation": 1,
            "pids": [],
            "uid": "u1",
            "exitCode": 0,
            "message": "",
            "reported": True,
        },
        "the recorded status merged first: its keys keep their place, the change's follow",
    ),
    (
        {"metadata": {"uid": "u2"}},
        {"phase": "Evicted", "generation": 4, "reason": "Preempted", "uid": "u1"},
        {"phase": "Running", "generation": 1, "pids": []},
        {"phase": "Running", "generation": 1, "pids": [], "uid": "u2"},
        "an older object's status of the same name is not merged (must not apply)",
    ),
    (
        None,
        None,
        {"phase": "Running", "generation": 1, "pids": []},
        None,
        "the object is gone: nothing is written",
    ),
]


async def test_a_status_write_stores_the_recorded_status_merged_with_the_change(
    watcher_bus: Bus,
) -> None:
    kv = await watcher_bus.kv(STATUS_BUCKET)
    for index, (obj, before, change, stored, why) in enumerate(WRITE_CASES):
        key = f"ns.job-{index}"
        store = StatusStore({} if obj is None else {key: obj})
        store.open(watcher_bus, kv, asyncio.Event())
        if before is not None:
            store.statuses[key] = before
        await store.settle(await store.send([(key, change)]))
        entry = await kv.get(key) if stored is not None else None
        if stored is None:
            assert key not in store.statuses, why
            with pytest.raises(Exception, match="not found"):
                await kv.get(key)
            continue
        assert entry is not None and entry.value is not None
        value = msgspec.json.decode(entry.value)
        assert isinstance(value.pop("updated"), str), why
        assert list(value.items()) == list(stored.items()), why
        assert store.statuses[key] == {**stored, "updated": store.statuses[key]["updated"]}, why
