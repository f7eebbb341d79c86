"""The bus against a real nats-server: ids dedupe, durable and replay consumers are sent
their subjects and resume where they acked, bad messages never loop, stops are prompt."""

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from shared.events import AnyEvent
from tests.conftest import ack_floor, acked_up_to
from tests.unbatched_bus import _bus, _consume_until, _submitted

MESSAGES_READ = "berth_bus_messages_read_total"


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
    """A batch whose handler raised is not acked: it is handled again, then acked."""
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
        info = await acked_up_to(bus, "flaky", 1)
        assert info.num_ack_pending == 0 and ack_floor(info) == 1
    finally:
        await bus.close()


async def test_malformed_message_is_dropped_not_looped(nats_url: str) -> None:
    """Garbage on an event subject is skipped (acked past); the good event after it is handled
    once."""
    bus = await _bus(nats_url)
    try:
        await bus.js.publish("berth.wl.submitted.default.x", b'{"type":"Nope"}')
        await bus.publish(_submitted(2))
        subscription = await bus.durable_subscription("m", ["berth.wl.>"])
        handled = await _consume_until(bus, subscription, 1)
        info = await acked_up_to(bus, "m", 2)
        assert handled == ["u2"]
        assert info.num_ack_pending == 0 and info.num_pending == 0
        assert ack_floor(info) == 2
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


async def test_consumer_is_sent_only_its_subjects(nats_url: str) -> None:
    """The server filters a consumer's subjects: an event on another subject is never sent
    to it (not only dropped here), yet acking past it leaves nothing pending."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(5)])
        await bus.js.publish("berth.cmd.other.default.x", b"not even an event")
        await bus.publish(_submitted(5))
        subscription = await bus.durable_subscription("only-wl", ["berth.wl.>"])
        handled = await _consume_until(bus, subscription, 6)
        info = await acked_up_to(bus, "only-wl", await bus.last_sequence())
        assert handled == [f"u{i}" for i in range(6)]
        assert info.num_ack_pending == 0 and info.num_pending == 0
        sent = {"consumer": "only-wl", "stage": "delivered"}
        assert REGISTRY.get_sample_value(MESSAGES_READ, {**sent, "subject": "wl.submitted"}) == 6
        assert REGISTRY.get_sample_value(MESSAGES_READ, {**sent, "subject": "cmd.other"}) is None
    finally:
        await bus.close()


async def test_refilter_changes_what_is_sent_from_the_next_message(nats_url: str) -> None:
    """A replay consumer refiltered mid-stream keeps its place: what it was sent stays, and
    from then on the server sends only the new subjects (admission's deciding leader is not
    sent its own admissions this way)."""
    bus = await _bus(nats_url)
    try:
        for i in range(4):
            await bus.publish(_submitted(i))
            await bus.js.publish(f"berth.cmd.create.default.c{i}", b"{}")
        subscription = await bus.replay_subscription(["berth.wl.>", "berth.cmd.>"])
        first = await subscription.fetch(4, timeout=1)
        assert await bus.refilter(subscription, ["berth.wl.>"]), "other filters: changed"
        assert not await bus.refilter(subscription, ["berth.wl.>"]), "the server's: unchanged"
        rest = await subscription.fetch(100, timeout=1)
        assert [m.subject.split(".")[1] for m in first] == ["wl", "cmd", "wl", "cmd"]
        assert [m.subject for m in rest] == [f"berth.wl.submitted.default.job-{i}" for i in (2, 3)]
    finally:
        await bus.close()


async def test_a_stop_ends_the_wait_for_the_next_batch_at_once(nats_url: str) -> None:
    """On SIGTERM the runtime interrupts the bus's waits: a loop waiting for its next batch
    returns now, not at the end of its idle timeout (30 s here), and waits no more after."""
    bus = await _bus(nats_url)
    try:
        subscription = await bus.durable_subscription("stopping", ["berth.wl.>"])
        assert await bus.next_batch(subscription, wait=0.0) == []
        waiting = asyncio.create_task(bus.next_batch(subscription, wait=30.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        bus.interrupt_waits()
        assert await asyncio.wait_for(waiting, 5) == []
        assert await asyncio.wait_for(bus.next_batch(subscription, wait=30.0), 5) == []
    finally:
        await bus.close()
