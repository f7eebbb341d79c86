"""A starting local backend announces the objects it lists in batches, in the bucket's order:
an orphaned run's eviction still comes before the announcements of the objects listed after
it, and after those listed before it (services/watcher/local/backend.py ``_observe_listed``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench.eventlog import read_events
from services.watcher.local import backend as local_backend
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
    times = [e.time for e in events if isinstance(e, WorkloadSubmitted | WorkloadEvicted)]
    assert times == sorted(times), "c and e's announcements are not earlier than the eviction"
    [evicted] = [e for e in events if isinstance(e, WorkloadEvicted)]
    assert evicted.reason == "WatcherRestarted"
    info = await bus.js.stream_info(STREAM, subjects_filter="berth.b.wl.submitted")
    assert info.state.subjects == {"berth.b.wl.submitted": SUBMITTED_BATCHES}


async def test_each_batch_of_a_long_listing_carries_its_own_moment(
    bus: Bus, nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing longer than one batch (LISTED_BATCH made 2 for five objects): the objects
    of one batch share a moment, read after the previous batch was sent, so a later batch
    carries a later time (admission sets its clock from each event's time as it folds: a
    time reused from the listing's start would step it back)."""
    monkeypatch.setattr(local_backend, "LISTED_BATCH", 2)
    objects = await bus.kv(OBJECTS_BUCKET)
    names = [f"job-{n}" for n in range(5)]
    for name in names:
        await objects.put(
            workload_key("default", name), msgspec.json.encode(_job(name, uid=f"u-{name}"))
        )

    await _start_and_stop_watcher(bus, tmp_path / "data")

    events = await read_events(nats_url, auth=bus_auth(nats_url))
    submitted = [e for e in events if isinstance(e, WorkloadSubmitted)]
    assert [e.workload.name for e in submitted] == names, "in the bucket's order"
    first, second, third = (submitted[0:2], submitted[2:4], submitted[4:])
    assert len({e.time for e in first}) == len({e.time for e in second}) == 1, "one per batch"
    assert first[0].time < second[0].time < third[0].time, "each batch read after the last"
