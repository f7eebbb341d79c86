"""A round of bucket changes is announced in batches of at most ``ANNOUNCE_PIECE``, each sent
as it fills and acked at the round's end, in the bucket's order; a deletion in the round
comes after the announcements before it (services/watcher/local/backend.py
``_observe_changes``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.kv import KeyValue

from bench.eventlog import read_events
from services.watcher.local import backend as local_backend
from services.watcher.local.backend import LocalBackend
from shared.bus import OBJECTS_BUCKET, STATUS_BUCKET, STREAM, Bus
from shared.bus.acks import Ack, AckTimeout
from shared.events import WorkloadDeleted, WorkloadSubmitted
from shared.service import Runtime
from shared.workloads import workload_key
from tests.conftest import bus_auth
from tests.test_watcher_finish_gap import _job


@pytest.fixture
def bus(watcher_bus: Bus) -> Bus:
    return watcher_bus


def _entry(revision: int, name: str, *, deleted: bool = False) -> KeyValue.Entry:
    value = b"" if deleted else msgspec.json.encode(_job(name, uid=f"u-{name}"))
    return KeyValue.Entry(
        bucket=OBJECTS_BUCKET,
        key=workload_key("default", name),
        value=value,
        revision=revision,
        delta=0,
        created=datetime.now(UTC),  # type: ignore[arg-type]  # as the bus's watch gives it
        operation="DEL" if deleted else None,
    )


# (the round's changes: name, deleted; the record expected; batches of submissions; why)
ROUNDS: list[tuple[list[tuple[str, bool]], list[tuple[str, str]], int, str]] = [
    (
        [(f"j{n}", False) for n in range(5)],
        [("WorkloadSubmitted", f"j{n}") for n in range(5)],
        3,
        "five new objects, pieces of two: [j0 j1] [j2 j3] [j4], not one batch",
    ),
    (
        [("j0", False), ("j1", False), ("j2", False), ("j0", True), ("j3", False)],
        [
            ("WorkloadSubmitted", "j0"),
            ("WorkloadSubmitted", "j1"),
            ("WorkloadSubmitted", "j2"),
            ("WorkloadDeleted", "j0"),
            ("WorkloadSubmitted", "j3"),
        ],
        3,
        "a deletion flushes what came before it: [j0 j1] [j2], then the deletion, then [j3]",
    ),
]


@pytest.mark.parametrize(
    ("changes", "expected", "batches", "reason"), ROUNDS, ids=[r[3] for r in ROUNDS]
)
async def test_a_round_of_changes_is_announced_in_pieces_in_the_buckets_order(
    bus: Bus,
    nats_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    changes: list[tuple[str, bool]],
    expected: list[tuple[str, str]],
    batches: int,
    reason: str,
) -> None:
    monkeypatch.setattr(local_backend, "ANNOUNCE_PIECE", 2)
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(tmp_path))
    backend = LocalBackend(runtime, stop_grace=1)
    backend.kv = await bus.kv(OBJECTS_BUCKET)
    backend.store.open(bus, await bus.kv(STATUS_BUCKET), runtime.stopping)
    entries = [_entry(n, name, deleted=deleted) for n, (name, deleted) in enumerate(changes, 1)]

    await backend._observe_changes(entries)

    events = await read_events(nats_url, auth=bus_auth(nats_url))
    told = [e for e in events if isinstance(e, WorkloadSubmitted | WorkloadDeleted)]
    assert [(type(e).__name__, e.workload.name) for e in told] == expected, reason
    times = [e.time for e in told]
    assert times == sorted(times), reason
    info = await bus.js.stream_info(STREAM, subjects_filter="berth.b.wl.submitted")
    assert info.state.subjects == {"berth.b.wl.submitted": batches}, reason
    assert backend.sending == [] and backend.announcing == set(), "all acked at the end"
    submitted = {e.workload.uid for e in told if isinstance(e, WorkloadSubmitted)}
    assert backend.announced == submitted, reason


async def _backend(bus: Bus, tmp_path: Path) -> LocalBackend:
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(tmp_path))
    backend = LocalBackend(runtime, stop_grace=1)
    backend.kv = await bus.kv(OBJECTS_BUCKET)
    backend.store.open(bus, await bus.kv(STATUS_BUCKET), runtime.stopping)
    return backend


def _lose_first_piece(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection loses the first batch sent (as when it drops and signs in anew: the
    ack tracker fails what waited on the old inbox, AckTimeout); the rest go out as ever."""
    send_many, calls = bus.acks.send_many, []

    async def losing(messages: Sequence[tuple[str, bytes, dict[str, str] | None]]) -> Any:
        calls.append(len(messages))
        if len(calls) > 1:
            return await send_many(messages)
        loop = asyncio.get_running_loop()
        lost: list[asyncio.Future[Ack]] = [loop.create_future() for _ in messages]
        for future in lost:
            future.set_exception(AckTimeout("the connection signed in anew: no reply"))
        return lost

    monkeypatch.setattr(bus.acks, "send_many", losing)


async def test_a_lost_piece_is_sent_again_after_the_later_ones(
    bus: Bus, nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failover mid-round: the first piece is lost, the second stored. The round's end sends
    the first again: every workload announced once, each piece whole, the lost one after the
    later one, with its earlier time (admission's fold clock does not step back for it:
    tests/test_fold_clock.py)."""
    monkeypatch.setattr(local_backend, "ANNOUNCE_PIECE", 2)
    backend = await _backend(bus, tmp_path)
    _lose_first_piece(bus, monkeypatch)

    await backend._observe_changes([_entry(n, f"j{n}") for n in range(4)])

    events = await read_events(nats_url, auth=bus_auth(nats_url))
    told = [e for e in events if isinstance(e, WorkloadSubmitted)]
    assert [e.workload.name for e in told] == ["j2", "j3", "j0", "j1"]
    assert told[2].time < told[0].time, "the piece sent again keeps its earlier time"
    assert backend.announced == {e.workload.uid for e in told}
    assert backend.sending == [] and backend.announcing == set()


async def test_a_round_that_fails_midway_leaves_no_ack_unread(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round that raises after a piece was sent (here its acks failed): the piece is left,
    not counted as announced, its failed acks read (no "Future exception was never
    retrieved" once it is gone). Failed before: the piece stayed in ``sending``."""
    monkeypatch.setattr(local_backend, "ANNOUNCE_PIECE", 2)
    backend = await _backend(bus, tmp_path)
    _lose_first_piece(bus, monkeypatch)

    async def failing(*args: object) -> None:
        raise RuntimeError("the dead-letter stream is gone")

    monkeypatch.setattr(backend, "_dead_letter", failing)
    malformed = _entry(3, "bad")
    malformed.value = b"{not json"
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        with pytest.raises(RuntimeError, match="dead-letter"):
            await backend._observe_changes([_entry(1, "j0"), _entry(2, "j1"), malformed])
        assert backend.sending == [] and backend.announcing == set()
        assert backend.announced == set(), "not acked: announced again by the next watcher"
        await asyncio.sleep(0)  # the outcomes are read as they come
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == []
