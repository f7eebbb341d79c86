"""A take's events handed over in pieces (shared/bus/pulling.py ``handling_chunks``): the rule
as a table, and both kinds of consumer against a real nats-server: pieces in stream order,
a durable take acked once its last piece is handled, a fence that never runs ahead of what
was handed over."""

from __future__ import annotations

import asyncio

import pytest

from shared.bus import STREAM, Bus
from shared.bus.pulling import EVENTS_PER_HANDLING, PullPump, handling_chunks
from shared.bus.settings import BusSettings
from shared.events import AnyEvent, LeaderElected
from tests.conftest import ack_floor, acked_up_to, connect_open
from tests.unbatched_bus import _submitted

SUBMITTED = ["berth.wl.submitted.>"]


# (events in the take, piece size, the pieces' sizes, why)
CHUNK_CASES = [
    (0, 512, [0], "an empty take is still one piece: it is handed over, so it is acked"),
    (1, 512, [1], "a lone event goes at once, as it came"),
    (512, 512, [512], "a take of exactly one piece is not split"),
    (513, 512, [512, 1], "one event more opens a second piece"),
    (1300, 512, [512, 512, 276], "a take of several batches: full pieces, the rest last"),
    (5, 2, [2, 2, 1], "the size is the caller's: any size of at least one"),
]


@pytest.mark.parametrize(
    ("count", "size", "sizes", "reason"), CHUNK_CASES, ids=[c[3] for c in CHUNK_CASES]
)
def test_a_take_is_handed_over_in_pieces(
    count: int, size: int, sizes: list[int], reason: str
) -> None:
    events: list[AnyEvent] = [_submitted(index) for index in range(count)]
    pieces = handling_chunks(events, size)
    assert [len(piece) for piece in pieces] == sizes, reason
    assert [e for piece in pieces for e in piece] == events, "in stream order, none lost"


def test_a_piece_of_no_events_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one event, not 0"):
        handling_chunks([_submitted(1)], 0)


async def _connect(url: str) -> Bus:
    bus = await connect_open(url, "admission", BusSettings(batching=True))
    await bus.ensure_stream()
    return bus


async def test_a_durable_take_goes_in_pieces_and_is_acked_after_the_last(nats_url: str) -> None:
    """The watcher's consumer: a round of more events than a piece holds (one or two batch
    messages) reaches the handler in pieces, in order, and the consumer acks it all."""
    count = 2 * EVENTS_PER_HANDLING + 276
    bus = await _connect(nats_url)
    try:
        await bus.publish_many([_submitted(index) for index in range(count)])
        subscription = await bus.durable_subscription("watcher", SUBMITTED)
        pieces: list[list[str]] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            pieces.append([event.id for event in events])
            if sum(map(len, pieces)) >= count:
                stop.set()

        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 20)
        assert all(len(piece) <= EVENTS_PER_HANDLING for piece in pieces), [
            len(piece) for piece in pieces
        ]
        assert len(pieces) >= 3, "more events than two pieces hold came in at least three"
        handled = [event_id for piece in pieces for event_id in piece]
        assert handled == [f"submitted-u{index}" for index in range(count)], "in order, once"
        last = (await bus.js.stream_info(STREAM)).state.last_seq
        info = await acked_up_to(bus, "watcher", last)
        assert info.num_ack_pending == 0 and ack_floor(info) == last, "all acked"
    finally:
        await bus.close()


async def test_next_batch_hands_pieces_and_its_fence_follows_them(nats_url: str) -> None:
    """Admission's consumer: a take holding more events than a piece, then a new leader's
    marker, comes in pieces; the fence moves past the marker only once the pieces before it
    were handed over (deciding early would miss the old leader's last decisions)."""
    count = EVENTS_PER_HANDLING + 88  # one batch message, then the marker: one take
    bus = await _connect(nats_url)
    try:
        await bus.publish_many([_submitted(index) for index in range(count)])
        await bus.publish(
            LeaderElected(source="admission", role="admission", holder="admission-b", term=1)
        )
        subscription = await bus.replay_subscription(SUBMITTED)
        pump = await bus._pump(subscription)
        await asyncio.wait_for(_arrived(pump, 2), 10)  # the batch and the marker: one take
        first = await bus.next_batch(subscription, wait=5.0)
        assert first is not None and len(first) == EVENTS_PER_HANDLING
        assert bus.fence(subscription).term("admission") == 0, "the marker is not handed yet"
        second = await bus.next_batch(subscription, wait=5.0)
        assert second is not None and len(second) == count - EVENTS_PER_HANDLING
        assert [e.id for e in first + second] == [f"submitted-u{i}" for i in range(count)]
        assert bus.fence(subscription).term("admission") == 1, "handed over: now it moved"
        assert await bus.next_batch(subscription, wait=0.3) == [], "and nothing more"
    finally:
        await bus.close()


async def _arrived(pump: PullPump, count: int) -> None:
    """Once ``count`` messages wait in the pump, so that the next take holds them all."""
    while len(pump.buffer) < count:
        pump.arrived.clear()
        await pump.arrived.wait()
