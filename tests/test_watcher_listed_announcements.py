"""A starting local backend announces the objects it lists in batches, in the bucket's order:
an orphaned run's eviction still comes before the announcements of the objects listed after
it, and after those listed before it (services/watcher/local/backend.py ``_observe_listed``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench.eventlog import read_events
from shared.bus import OBJECTS_BUCKET, STATUS_BUCKET, STREAM, Bus
from shared.events import WorkloadEvicted, WorkloadSubmitted
from shared.workloads import workload_key
from tests.conftest import bus_auth
from tests.test_watcher_finish_gap import _job, _start_and_stop_watcher

# name, stored status (besides uid) or None, why it is (or is not) announced where it is
LISTED: list[tuple[str, dict[str, Any] | None, str]] = [
    ("a-pending", None, "never started: announced"),
    ("b-pending", None, "announced with a-pending, in one batch"),
    (
        "c-orphan",
        {"phase": "Running", "generation": 1, "pids": []},
        "ran under the last watcher: its eviction after a and b's announcements, before its own",
    ),
    ("d-done", {"phase": "Succeeded", "generation": 1, "pids": [], "reported": True}, "finished"),
    ("e-pending", None, "announced after c-orphan's eviction, with c-orphan"),
]

# The record the start leaves, in order: (type, name); then the batches of submissions.
EXPECTED = [
    ("WorkloadSubmitted", "a-pending"),
    ("WorkloadSubmitted", "b-pending"),
    ("WorkloadEvicted", "c-orphan"),
    ("WorkloadSubmitted", "c-orphan"),
    ("WorkloadSubmitted", "e-pending"),
]
SUBMITTED_BATCHES = 2  # [a, b] before the eviction, [c, e] after it: not one per object


@pytest.fixture
def bus(watcher_bus: Bus) -> Bus:
    return watcher_bus


async def test_the_listed_objects_are_announced_in_batches_in_the_buckets_order(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    objects = await bus.kv(OBJECTS_BUCKET)
    statuses = await bus.kv(STATUS_BUCKET)
    for name, status, _ in LISTED:
        key = workload_key("default", name)
        await objects.put(key, msgspec.json.encode(_job(name, uid=f"u-{name}")))
        if status is not None:
            await statuses.put(key, msgspec.json.encode({"uid": f"u-{name}", **status}))

    await _start_and_stop_watcher(bus, tmp_path / "data")

    events = await read_events(nats_url, auth=bus_auth(nats_url))
    record = [
        (type(e).__name__, e.workload.name)
        for e in events
        if isinstance(e, WorkloadSubmitted | WorkloadEvicted)
    ]
    assert record == EXPECTED, [why for _, _, why in LISTED]
    [evicted] = [e for e in events if isinstance(e, WorkloadEvicted)]
    assert evicted.reason == "WatcherRestarted"
    info = await bus.js.stream_info(STREAM, subjects_filter="berth.b.wl.submitted")
    assert info.state.subjects == {"berth.b.wl.submitted": SUBMITTED_BATCHES}
