"""What the bus's tests against a real nats-server share: a bus publishing one message
per event, the event they publish, and a consumer run until it has handled so many."""

import asyncio

from nats.js import JetStreamContext

from shared.bus import Bus
from shared.bus.settings import BusSettings
from shared.events import AnyEvent, PodSet, WorkloadRef, WorkloadSubmitted, now
from tests.conftest import bus_auth


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


async def _consume_until(
    bus: Bus, subscription: JetStreamContext.PullSubscription, count: int
) -> list[str]:
    """Consume until ``count`` events were handled; their uids (the acks may still be on
    their way: ``acked_up_to``)."""
    handled: list[str] = []
    stop = asyncio.Event()

    async def handler(events: list[AnyEvent]) -> None:
        handled.extend(e.workload.uid for e in events)
        if len(handled) >= count:
            stop.set()

    await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
    return handled


async def _bus(url: str) -> Bus:
    """A bus publishing one message per event: the path of the CLI's commands and of
    BERTH_BUS_BATCHES=0, whose message-level mechanics the tests using it count (the batched
    path: tests/batched_bus.py)."""
    bus = await Bus.connect(
        url, source="test", auth=bus_auth(url), settings=BusSettings(batching=False)
    )
    await bus.ensure_stream()
    return bus
