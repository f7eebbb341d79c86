"""Deliveries lost on the way (shared/bus/gaps.py): the rule as a table, and a consumer
whose connection dies with a delivery in flight, against a real nats-server through a
proxy that drops what it holds (tests/tcp_cut.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg

from berth_cli.natsserver import NatsServer
from shared.auth import ClientAuth
from shared.bus import Bus
from shared.bus.gaps import Deliveries
from shared.events import AnyEvent
from tests.console_data import submitted
from tests.tcp_cut import CuttableProxy


def _delivery(consumer_seq: int, stream_seq: int) -> Msg:
    """A message as a consumer delivers it: its sequences are in its reply subject."""
    reply = f"$JS.ACK.BERTH.c.1.{stream_seq}.{consumer_seq}.1700000000000000000.0"
    return Msg(None, subject="berth.b.wl.submitted", reply=reply)  # type: ignore[arg-type]


# (last taken: consumer, stream sequence; the next delivery's; lost between, why)
GAPS = [
    ((4, 10), (5, 11), None, "the next delivery of the next message"),
    ((4, 10), (5, 30), None, "the next delivery, of a message stored later: others filtered"),
    ((4, 10), (7, 30), (10, 30), "two deliveries missing: what is stored between is read again"),
    ((4, 10), (5, 8), None, "a redelivery of an older message (ack-all): numbered anew"),
    ((0, 0), (1, 1), None, "a new consumer's first delivery"),
    ((0, 0), (3, 3), (0, 3), "a new consumer's first two deliveries lost"),
    ((4, 10), (6, 11), None, "numbered past one lost, but nothing stored between"),
]


@pytest.mark.parametrize(("last", "delivery", "lost", "reason"), GAPS)
def test_a_lost_delivery_is_a_jump_in_the_consumers_numbers(
    last: tuple[int, int],
    delivery: tuple[int, int],
    lost: tuple[int, int] | None,
    reason: str,
) -> None:
    deliveries = Deliveries(*last)
    assert deliveries.lost_before(_delivery(*delivery)) == lost, reason
    assert (deliveries.consumer_seq, deliveries.stream_seq) == (
        max(last[0], delivery[0]),
        max(last[1], delivery[1]),
    ), "taken up to the later of both"


@pytest.fixture
async def proxied(nats_server: NatsServer) -> AsyncIterator[tuple[CuttableProxy, str]]:
    proxy = CuttableProxy(nats_server.port)
    url = await proxy.start()
    try:
        yield proxy, url
    finally:
        await proxy.close()


async def _names(bus: Bus, take: object, count: int) -> list[str]:
    """Workload names from ``take`` (a coroutine function giving events) until ``count``."""
    names: list[str] = []
    for _ in range(40):
        events: list[AnyEvent] = await take()  # type: ignore[operator]
        names += [event.workload.name for event in events]
        if len(names) >= count:
            break
    return names


async def _lose_one_delivery(proxy: CuttableProxy, publisher: Bus) -> None:
    """Publish ``a`` while the proxy holds what the server sends, then cut: ``a``'s
    delivery is lost on the way, and the client reconnects through the proxy."""
    proxy.hold()
    await publisher.publish(submitted("a"))
    await asyncio.sleep(0.3)  # the server sent it (into the proxy)
    await proxy.cut()
    await asyncio.sleep(0.5)  # the client reconnects
    await publisher.publish(submitted("b"))


@pytest.mark.parametrize("kind", ["replay", "durable"])
async def test_a_delivery_lost_when_the_connection_dies_is_read_again(
    nats_url: str, proxied: tuple[CuttableProxy, str], kind: str
) -> None:
    """Admission's kind of consumer (replay, acking nothing) and the watcher's (durable,
    acking all up to a message) each get ``a``, lost on the way, before ``b``, once."""
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
        await _lose_one_delivery(proxy, publisher)
        assert await _names(reader, take, 2) == ["a", "b"]
        assert await take() == [], "and nothing twice"
    finally:
        await reader.close()
        await publisher.close()
