"""Deliveries lost on the way (shared/bus/gaps.py): the rule as a table, and a consumer
whose connection dies with a delivery in flight, against a real nats-server through a
proxy that drops what it holds (tests/tcp_cut.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo

from berth_cli.natsserver import NatsServer
from shared.auth import ClientAuth
from shared.bus import STREAM, Bus, BusTimeout
from shared.bus.gaps import Deliveries
from shared.bus.pulling import PullPump
from shared.events import AnyEvent
from tests.console_data import submitted
from tests.tcp_cut import CuttableProxy


def _delivery(consumer_seq: int, stream_seq: int) -> Msg:
    """A message as a consumer delivers it: its sequences are in its reply subject."""
    reply = f"$JS.ACK.BERTH.c.1.{stream_seq}.{consumer_seq}.1700000000000000000.0"
    return Msg(None, subject="berth.b.wl.submitted", reply=reply)  # type: ignore[arg-type]


# (last taken: consumer, stream sequence; the deliveries that follow, each as (consumer,
# stream sequence); the lost ranges found before each, why)
GAPS = [
    ((4, 10), [(5, 11)], [None], "the next delivery of the next message"),
    ((4, 10), [(5, 30)], [None], "the next delivery, of a message stored later: others filtered"),
    ((4, 10), [(7, 30)], [(10, 30)], "two deliveries missing: what is stored between is read"),
    ((4, 10), [(5, 8)], [None], "a redelivery of an older message (ack-all): numbered anew"),
    ((0, 0), [(1, 1)], [None], "a new consumer's first delivery"),
    ((0, 0), [(3, 3)], [(0, 3)], "a new consumer's first two deliveries lost"),
    ((4, 10), [(6, 11)], [None], "numbered past one lost, but nothing stored between"),
    (
        (4, 10),
        [(6, 8), (7, 12)],
        [None, (10, 12)],
        "a jump seen on a redelivery: the next new message is placed after a gap",
    ),
    (
        (4, 10),
        [(6, 8), (7, 11), (8, 13)],
        [None, None, None],
        "a jump on a redelivery, then the very next message stored: nothing between",
    ),
]


@pytest.mark.parametrize(("last", "deliveries", "lost", "reason"), GAPS)
def test_a_lost_delivery_is_a_jump_in_the_consumers_numbers(
    last: tuple[int, int],
    deliveries: list[tuple[int, int]],
    lost: list[tuple[int, int] | None],
    reason: str,
) -> None:
    taken = Deliveries(*last)
    found = []
    for delivery in deliveries:
        msg = _delivery(*delivery)
        found.append(taken.lost_before(msg))
        taken.take(msg)
    assert found == lost, reason
    assert (taken.consumer_seq, taken.stream_seq) == (
        max([last[0], *(d[0] for d in deliveries)]),
        max([last[1], *(d[1] for d in deliveries)]),
    ), "taken up to the latest of all"


@pytest.mark.parametrize(
    ("delivery", "straggler", "reason"),
    [
        ((6, 12), True, "counted by the server, read again from the stream, then it came"),
        ((5, 11), True, "an earlier one that was still coming"),
        ((7, 13), False, "the next delivery after the tail read again"),
        ((7, 9), False, "a redelivery (ack-all): numbered anew, handled again"),
        ((5, 14), False, "a number seen before, of a message not read again: handed over"),
    ],
)
def test_after_the_tail_is_read_again_a_delivery_still_coming_is_dropped(
    delivery: tuple[int, int], straggler: bool, reason: str
) -> None:
    taken = Deliveries(4, 10)
    taken.cover(6, 12)  # the server counted two more deliveries, read again
    assert taken.straggler(_delivery(*delivery)) is straggler, reason


async def test_a_gap_that_cannot_be_read_yet_holds_back_what_follows(nats_url: str) -> None:
    """A refetch that fails (NATS still electing a leader, say) hands over what came before
    the gap and keeps the rest; the next take reads the gap and hands it over in place."""
    attempts: list[tuple[int, int]] = []
    refetched = _delivery(1, 11)

    async def read_again(after: int, before: int) -> list[Msg]:
        attempts.append((after, before))
        if len(attempts) == 1:
            raise BusTimeout("no stream leader yet")
        return [refetched]

    bus = await Bus.connect(nats_url, source="admission", auth=ClientAuth(), retry=False)
    try:
        pump = PullPump(bus.nc, "unused", Deliveries(4, 9), read_again)
        before, after = _delivery(5, 10), _delivery(7, 12)
        pump.buffer = [before, after]
        assert await pump.take(None, wait=0) == [before], "the part before the gap"
        assert pump.buffer == [after], "kept, not handed over past the gap"
        assert await pump.take(None, wait=0) == [refetched, after]
        assert attempts == [(10, 12), (10, 12)]
    finally:
        await bus.close()


@pytest.fixture
async def proxied(nats_server: NatsServer) -> AsyncIterator[tuple[CuttableProxy, str]]:
    proxy = CuttableProxy(nats_server.port)
    url = await proxy.start()
    try:
        yield proxy, url
    finally:
        await proxy.close()


async def _names(bus: Bus, take: object, count: int, *, tries: int = 40) -> list[str]:
    """Workload names from ``take`` (a coroutine function giving events) until ``count``,
    or ``tries`` takes."""
    names: list[str] = []
    for _ in range(tries):
        events: list[AnyEvent] = await take()  # type: ignore[operator]
        names += [event.workload.name for event in events]
        if len(names) >= count:
            break
    return names


async def _lose_one_delivery(
    proxy: CuttableProxy,
    publisher: Bus,
    reader: Bus,
    subscription: JetStreamContext.PullSubscription,
    *,
    then_b: bool = True,
) -> None:
    """Publish ``a`` while the proxy holds what the server sends, then cut: ``a``'s
    delivery is lost on the way (the consumer counts it delivered), and the client
    reconnects through the proxy."""
    consumer = (await subscription.consumer_info()).name  # before the replies are held
    proxy.hold()
    await publisher.publish(submitted("a"))
    # Until the server sent it (into the proxy): asked through the publisher, whose replies
    # the proxy does not hold.
    deadline = time.monotonic() + 5
    while (await publisher.js.consumer_info(STREAM, consumer)).delivered.consumer_seq < 1:
        assert time.monotonic() < deadline, "a was never sent"
        await asyncio.sleep(0.02)
    reconnects = reader.nc.stats["reconnects"]
    await proxy.cut()
    deadline = time.monotonic() + 5
    while reader.nc.stats["reconnects"] == reconnects or not reader.nc.is_connected:
        assert time.monotonic() < deadline, "the reader did not reconnect"
        await asyncio.sleep(0.02)
    info = await subscription.consumer_info()
    assert info.delivered.consumer_seq == 1, "a was sent, and never arrived"
    if then_b:
        await publisher.publish(submitted("b"))


# (consumer kind, whether b is published after the lost a, the names handed over, why)
LOSSES = [
    ("replay", True, ["a", "b"], "admission's kind (acking nothing): a read again before b"),
    ("durable", True, ["a", "b"], "the watcher's kind (acking all up to a message): the same"),
    ("replay", False, ["a"], "the last delivery lost, nothing after it to show the gap"),
    ("durable", False, ["a"], "the same, before the ack wait (30 s) would send it again"),
]


@pytest.mark.parametrize(("kind", "then_b", "names", "reason"), LOSSES)
async def test_a_delivery_lost_when_the_connection_dies_is_read_again(
    nats_url: str,
    proxied: tuple[CuttableProxy, str],
    kind: str,
    then_b: bool,
    names: list[str],
    reason: str,
) -> None:
    """A consumer whose delivery of ``a`` is lost on the way gets it, in order, once."""
    proxy, url = proxied
    publisher = await Bus.connect(nats_url, source="watcher", auth=ClientAuth(), retry=False)
    reader = await Bus.connect(url, source="admission", auth=ClientAuth())
    try:
        await publisher.ensure_stream()
        if kind == "replay":
            subscription = await reader.replay_subscription(["berth.wl.submitted.>"])
        else:
            subscription = await reader.durable_subscription("t", ["berth.wl.submitted.>"])

        async def take() -> list[AnyEvent]:
            return await reader.next_batch(subscription, wait=0.25) or []

        assert await take() == [], "the consumer is reading, nothing stored yet"
        await _lose_one_delivery(proxy, publisher, reader, subscription, then_b=then_b)
        assert await _names(reader, take, len(names)) == names, reason
        assert await _names(reader, take, 1, tries=4) == [], "and nothing twice"
    finally:
        await reader.close()
        await publisher.close()


def _info(ack_policy: str, delivered: tuple[int, int], floor: tuple[int, int]) -> ConsumerInfo:
    """A consumer's info as nats-server answers it (its JSON), read by nats-py."""
    return ConsumerInfo.from_response(
        {
            "name": "c",
            "stream_name": "BERTH",
            "created": "2026-11-26T00:00:00Z",
            "config": {"ack_policy": ack_policy},
            "delivered": {"consumer_seq": delivered[0], "stream_seq": delivered[1]},
            "ack_floor": {"consumer_seq": floor[0], "stream_seq": floor[1]},
        }
    )


@pytest.mark.parametrize(
    ("ack_policy", "start", "reason"),
    [
        ("none", (9, 30), "a replay (acking nothing) counts from what it delivered"),
        ("all", (4, 10), "an ack-all durable from its ack floor: unacked deliveries read again"),
    ],
)
def test_where_a_service_starts_counting_a_consumer(
    ack_policy: str, start: tuple[int, int], reason: str
) -> None:
    taken = Deliveries.taken_by(_info(ack_policy, delivered=(9, 30), floor=(4, 10)))
    assert (taken.consumer_seq, taken.stream_seq) == start, reason
