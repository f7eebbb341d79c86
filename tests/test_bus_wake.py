"""``Bus.wake`` against a real nats-server: it ends the wait for the next batch under way
(admission's acks came in: services/admission/outbox.py), and only that one."""

from __future__ import annotations

import asyncio

from tests.unbatched_bus import _bus, _submitted


async def test_a_wake_ends_one_wait_for_the_next_batch(nats_url: str) -> None:
    """``wake`` (admission's acks came in: a pass may be due) ends the wait under way, with
    nothing; unlike a stop, the next wait waits again, and events still come."""
    bus = await _bus(nats_url)
    try:
        subscription = await bus.durable_subscription("woken", ["berth.wl.>"])
        assert await bus.next_batch(subscription, wait=0.0) == []
        waiting = asyncio.create_task(bus.next_batch(subscription, wait=30.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        bus.wake(subscription)
        assert await asyncio.wait_for(waiting, 5) == []
        again = asyncio.create_task(bus.next_batch(subscription, wait=30.0))
        await asyncio.sleep(0.1)
        assert not again.done(), "the next wait waits"
        await bus.publish(_submitted(1))
        events = await asyncio.wait_for(again, 5)
        assert events is not None and [e.workload.name for e in events] == ["job-1"]
    finally:
        await bus.close()
