"""The bus against a real nats-server: ids dedupe, batches ack, bad messages never loop."""

import asyncio
import time

import pytest

from shared.bus import STREAM, Bus
from shared.events import AnyEvent, PodSet, WorkloadRef, WorkloadSubmitted, now


def _submitted(index: int) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        id=f"submitted-u{index}",
        source="test",
        workload=WorkloadRef("default", f"job-{index}", f"u{index}"),
        kind="Job",
        queue_name="user-queue",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=now(),
    )


async def _bus(url: str) -> Bus:
    bus = await Bus.connect(url, source="test")
    await bus.ensure_stream()
    return bus


async def test_same_id_is_stored_once(nats_url: str) -> None:
    """Publishing an event again with the same id (a retry) stores it only once."""
    bus = await _bus(nats_url)
    try:
        events = [_submitted(i) for i in range(50)]
        await bus.publish_many(events)
        await bus.publish_many(events[:10])
        ack = await bus.publish(events[0])
        assert ack.duplicate
        assert await bus.last_sequence() == 50
    finally:
        await bus.close()


async def test_consumer_resumes_where_it_acked(nats_url: str) -> None:
    """A durable consumer that restarts gets only what it had not acked."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(20)])
        seen: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            seen.extend(e.workload.uid for e in events)
            if len(seen) >= 20:
                stop.set()

        subscription = await bus.durable_subscription("t", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        await subscription.unsubscribe()
        await bus.publish_many([_submitted(i) for i in range(20, 25)])
        stop.clear()
        seen.clear()

        async def rest(events: list[AnyEvent]) -> None:
            seen.extend(e.workload.uid for e in events)
            if len(seen) >= 5:
                stop.set()

        again = await bus.durable_subscription("t", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(again, rest, stopping=stop), 10)
        assert seen == [f"u{i}" for i in range(20, 25)]
    finally:
        await bus.close()


async def test_failed_handler_is_redelivered(nats_url: str) -> None:
    """A batch whose handler raised is not acked and comes back."""
    bus = await _bus(nats_url)
    try:
        await bus.publish(_submitted(1))
        attempts = 0
        stop = asyncio.Event()

        async def flaky(events: list[AnyEvent]) -> None:
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                raise RuntimeError("boom")
            stop.set()

        subscription = await bus.durable_subscription("flaky", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, flaky, stopping=stop), 15)
        assert attempts == 2
    finally:
        await bus.close()


async def test_malformed_message_is_dropped_not_looped(nats_url: str) -> None:
    """Garbage on an event subject is terminated; the good event after it is handled once."""
    bus = await _bus(nats_url)
    try:
        await bus.js.publish("berth.wl.submitted.default.x", b'{"type":"Nope"}')
        await bus.publish(_submitted(2))
        handled: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(e.workload.uid for e in events)
            if handled:
                stop.set()

        subscription = await bus.durable_subscription("m", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        await asyncio.sleep(0.3)
        info = await bus.js.consumer_info(STREAM, "m")
        assert handled == ["u2"]
        assert info.num_ack_pending == 0 and info.num_pending == 0
    finally:
        await bus.close()


async def test_close_after_idle_fetches_is_prompt(nats_url: str) -> None:
    """Closing after fetches timed out does not hang for drain's 30 s timeout."""
    bus = await _bus(nats_url)
    subscription = await bus.durable_subscription("idle", ["berth.wl.>"])
    with pytest.raises(TimeoutError):
        await subscription.fetch(1, timeout=0.2)
    started = time.monotonic()
    await bus.close()
    assert time.monotonic() - started < 3


async def test_replay_reads_from_the_first_event(nats_url: str) -> None:
    """A replay consumer sees every stored event, oldest first."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(30)])
        subscription = await bus.replay_subscription(["berth.wl.>"])
        messages = await subscription.fetch(100, timeout=1)
        assert len(messages) == 30
        assert messages[-1].metadata.num_pending == 0
    finally:
        await bus.close()
