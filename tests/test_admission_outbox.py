"""The deciding leader's publishes (services/admission/outbox.py) against a real nats-server:
sent in the order made, each piece as soon as it is made, nothing while an earlier ack is to
come, and a publish that fails for good raised and stopping the service before anything made
after it is sent."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

from berth_cli.natsserver import NatsServer
from services.admission.outbox import Outbox
from shared.bus import Bus, BusError
from shared.events import Event
from shared.service import Runtime
from tests.batched_bus import _admitted, _connect, _pending, _replayed
from tests.conftest import frozen

# (reason, the pieces' workload names; a name starting with "p" is a pending report)
ORDERS: list[tuple[str, list[list[str]]]] = [
    ("one piece: as one publish", [["a", "pb", "c"]]),
    (
        "several pieces: each event once, each piece after the one before",
        [["a", "pb"], ["c"], ["pd", "e", "f"]],
    ),
    ("an empty piece among them changes nothing", [["a"], [], ["b"]]),
]


def _event(name: str) -> Event:
    return _pending(name) if name.startswith("p") else _admitted(name)


def _outbox(bus: Bus, tmp_path: Path) -> Outbox:
    return Outbox(bus, Runtime(name="admission", bus=bus, data_dir=str(tmp_path)))


def _assert_in_order(stored: list[str], names: list[list[str]], reason: str) -> None:
    """A piece goes out as one batch per family: in order within a family, and each piece's
    after the piece before."""
    flat = [n for piece in names for n in piece]
    start = 0
    for piece in names:
        assert sorted(stored[start : start + len(piece)]) == sorted(piece), reason
        start += len(piece)
    for family in (lambda n: n.startswith("p"), lambda n: not n.startswith("p")):
        assert [n for n in stored if family(n)] == [n for n in flat if family(n)], reason


@pytest.mark.parametrize(("reason", "names"), ORDERS, ids=[c[0] for c in ORDERS])
async def test_pieces_are_stored_once_each_in_order(
    nats_url: str, tmp_path: Path, reason: str, names: list[list[str]]
) -> None:
    bus = await _connect(nats_url, "admission")
    try:
        outbox = _outbox(bus, tmp_path)
        await outbox.send([[_event(n) for n in piece] for piece in names])
        await outbox.settled()
        flat = [n for piece in names for n in piece]
        stored = [e.workload.name for e in await _replayed(bus, ["berth.>"], len(flat))]
        _assert_in_order(stored, names, reason)
    finally:
        await bus.close()


async def test_each_piece_is_written_before_the_next_is_made(nats_url: str, tmp_path: Path) -> None:
    """With no ack to come, what makes the pieces is resumed only once the piece before is
    handed to the client and written out (nothing left in its buffer): a pass's first
    admissions are on their way while the rest are made."""
    bus = await _connect(nats_url, "admission")
    seen: list[tuple[int, int]] = []  # (messages handed to the client, bytes not yet written)

    def pieces() -> Iterator[list[Event]]:
        for name in ("a", "b", "c"):
            seen.append((bus.nc.stats["out_msgs"], bus.nc.pending_data_size))
            yield [_admitted(name)]

    try:
        outbox = _outbox(bus, tmp_path)
        await outbox.send(pieces())
        handed = [count for count, _ in seen]
        assert handed[0] < handed[1] < handed[2], seen
        assert [buffered for _, buffered in seen[1:]] == [0, 0], seen
        await outbox.settled()
    finally:
        await bus.close()


async def test_nothing_is_sent_while_an_earlier_ack_is_to_come(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """With the server paused, the first publish's ack cannot come: a second publish waits,
    unsent, until it has, and the stream stores them in the order they were made (as if
    the first were sent again, it would still be stored first)."""
    assert nats_server.process is not None
    bus = await _connect(nats_server.url, "admission")
    try:
        outbox = _outbox(bus, tmp_path)
        told: list[bool] = []
        outbox.on_settled = lambda: told.append(True)
        frozen(nats_server.process.pid)  # every thread stopped: no ack can come
        try:
            await outbox.send([[_admitted("a")]])
            assert outbox.busy(), "the first publish's ack is still to come"
            handed = bus.nc.stats["out_msgs"]
            second = asyncio.create_task(outbox.send([[_pending("pb")], [_admitted("c")]]))
            await asyncio.sleep(0.5)
            assert not second.done() and bus.nc.stats["out_msgs"] == handed, "nothing sent"
        finally:
            os.kill(nats_server.process.pid, signal.SIGCONT)
        await asyncio.wait_for(second, 10)
        await outbox.settled()
        assert not outbox.busy()
        assert told == [True, True], "told each time the last ack came in"
        stored = [e.workload.name for e in await _replayed(bus, ["berth.>"], 3)]
        _assert_in_order(stored, [["a"], ["pb"], ["c"]], "the second after the first's ack")
    finally:
        await bus.close()


async def test_a_failure_while_making_pieces_keeps_what_was_sent(
    nats_url: str, tmp_path: Path
) -> None:
    """The error reaches the caller (the service stops; its restart rebuilds from the
    stream), and the pieces sent before it are stored: nothing is sent twice or half."""
    bus = await _connect(nats_url, "admission")

    def pieces() -> Iterator[list[Event]]:
        yield [_admitted("a"), _admitted("b")]
        raise RuntimeError("making the second piece failed")

    try:
        outbox = _outbox(bus, tmp_path)
        with pytest.raises(RuntimeError, match="second piece"):
            await outbox.send(pieces())
        assert outbox.busy(), "what was sent is settled still"
        await outbox.settled()
        events = await _replayed(bus, ["berth.>"], 2)
        assert [e.workload.name for e in events] == ["a", "b"]
    finally:
        await bus.close()


async def test_a_publish_that_fails_for_good_stops_the_service(
    nats_url: str, tmp_path: Path
) -> None:
    """With the stream gone, the ack is a refusal: the task awaiting it fails, the runtime
    stops the service (failed), and a publish made while it was awaited raises unsent, as
    does waiting for the outbox: nothing decided after it is sent."""
    bus = await _connect(nats_url, "admission")
    runtime = Runtime(name="admission", bus=bus, data_dir=str(tmp_path))
    outbox = Outbox(bus, runtime)
    admin = await nats.connect(nats_url)
    # The per-workload copies published from here on: each event's copy goes out just before
    # its batch (read here, without answering: its batch still finds no stream).
    sent: list[bytes] = []

    async def seen(msg: Msg) -> None:
        sent.append(msg.data)

    try:
        await admin.subscribe("berth.cq.>", cb=seen)
        await admin.flush()
        await admin.jetstream().delete_stream("BERTH")
        await outbox.send([[_admitted("a")]])
        with pytest.raises(BusError):
            await asyncio.wait_for(outbox.send([[_admitted("b")]]), timeout=30)
        await admin.flush()
        assert any(b'"name":"a"' in data for data in sent), "the observer sees what is sent"
        assert not any(b'"name":"b"' in data for data in sent), "the later one never sent"
        assert runtime.stopping.is_set() and runtime.failed
        with pytest.raises(BusError):
            await outbox.settled()
    finally:
        await admin.close()
        await bus.close()
