"""The bus against a real nats-server: batches ack (one ack covers a batch, never a
failure), and a batch left settling is acked only once settled."""

import asyncio
from collections.abc import Awaitable

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from shared.bus import STREAM, consuming
from shared.events import AnyEvent
from tests.conftest import ack_floor, acked_up_to
from tests.unbatched_bus import _bus, _consume_until, _submitted


async def test_one_ack_covers_a_batch_and_a_failure_is_never_covered(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable consumers ack all up to a message. An event whose handler keeps failing is
    retried, then dropped with a log line; the events around it are handled, each once."""
    monkeypatch.setattr(consuming, "HANDLER_ATTEMPTS", 2)
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(10)])
        handled: list[str] = []
        tries_of_poison = 0
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            nonlocal tries_of_poison
            if any(e.workload.uid == "u4" for e in events):
                tries_of_poison += 1
                raise RuntimeError("poison")
            handled.extend(e.workload.uid for e in events)
            if len(handled) >= 9:
                stop.set()

        subscription = await bus.durable_subscription("poison", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 15)
        info = await acked_up_to(bus, "poison", 10)
        assert info.config.ack_policy == AckPolicy.ALL
        assert sorted(handled) == sorted(f"u{i}" for i in range(10) if i != 4)
        assert tries_of_poison == 2 + 3  # the batch twice, then the event alone three times
        assert info.num_ack_pending == 0 and ack_floor(info) == 10
    finally:
        await bus.close()


async def test_consumer_with_explicit_acks_is_recreated_where_it_was(nats_url: str) -> None:
    """A durable consumer made by an older Berth (one ack per message) resumes after what it
    had acked, under the new ack policy."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(6)])
        await bus.js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name="old", ack_policy=AckPolicy.EXPLICIT, filter_subject="berth.wl.>"
            ),
        )
        old = await bus.js.pull_subscribe_bind("old", stream=STREAM)
        for msg in await old.fetch(4, timeout=5):
            await msg.ack_sync()
        await old.unsubscribe()
        subscription = await bus.durable_subscription("old", ["berth.wl.>"])
        handled = await _consume_until(bus, subscription, 2)
        assert handled == ["u4", "u5"]
        info = await bus.js.consumer_info(STREAM, "old")
        assert info.config.ack_policy == AckPolicy.ALL
    finally:
        await bus.close()


async def test_a_batch_left_settling_is_acked_only_once_settled(nats_url: str) -> None:
    """A handler may return what it still has in flight: the next batch is handed over at
    once, and nothing is acked past a batch that has not settled."""
    bus = await _bus(nats_url)
    try:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handled: list[str] = []
        arrived = asyncio.Event()
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> Awaitable[None] | None:
            handled.extend(e.workload.uid for e in events)
            arrived.set()
            return gate if handled == ["u0"] else None

        subscription = await bus.durable_subscription("settling", ["berth.wl.>"])
        consuming = asyncio.create_task(bus.consume(subscription, handler, stopping=stop))
        await bus.publish(_submitted(0))
        await asyncio.wait_for(arrived.wait(), 5)
        arrived.clear()
        await bus.publish(_submitted(1))
        await asyncio.wait_for(arrived.wait(), 5)  # handed over while the first still settles
        assert handled == ["u0", "u1"]
        await asyncio.sleep(0.3)  # room for an ack that must not come
        assert ack_floor(await bus.js.consumer_info(STREAM, "settling")) == 0
        gate.set_result(None)
        assert ack_floor(await acked_up_to(bus, "settling", 2)) == 2
        stop.set()
        await asyncio.wait_for(consuming, 5)
    finally:
        await bus.close()


async def test_a_batch_whose_settling_failed_is_handled_again(nats_url: str) -> None:
    bus = await _bus(nats_url)
    try:
        calls = 0
        stop = asyncio.Event()

        async def fails_once() -> None:
            raise RuntimeError("write lost")

        async def handler(events: list[AnyEvent]) -> Awaitable[None] | None:
            nonlocal calls
            calls += 1
            if calls == 1:
                return fails_once()
            stop.set()
            return None

        await bus.publish(_submitted(0))
        subscription = await bus.durable_subscription("resettle", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        assert calls == 2
        assert ack_floor(await acked_up_to(bus, "resettle", 1)) == 1
    finally:
        await bus.close()
