"""What tells the Kubernetes status writer that a workload changed: every decision and fact.

The writer follows them from the event stream with an ordered consumer that starts at the
next event, not with core subscriptions on the event subjects: on a secured bus a user may
subscribe only on its own inbox (shared/auth.py), and a JetStream consumer delivers there.
Missing an event is harmless (the writer starts, and restarts, with a full round), so a
consumer that dies with a NATS node is simply made again by nats-py's ordered consumer. With
batches on, it is sent the batches, never the per-workload copies, which a deployment may
not keep (``BERTH_BUS_COPIES``, docs/events.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

from shared.bus import STREAM, Bus, BusError, bus_call
from shared.bus.batches import record_events
from shared.events import AnyEvent
from shared.subjects import batched_filters

# What marks a workload dirty: every decision and fact about it.
TRIGGERS = ("berth.cq.>", "berth.wl.>")


def trigger_filters(*, batching: bool) -> list[str]:
    """The consumer's subjects: the batches of the trigger families with batches on (the
    record, whatever copies are kept), else the per-event subjects."""
    return batched_filters(TRIGGERS)[0] if batching else list(TRIGGERS)


async def follow_triggers(
    bus: Bus, on_events: Callable[[list[AnyEvent]], Awaitable[None]]
) -> list[Subscription]:
    """One ordered consumer on the triggers, handing the events of each new message (a
    batch's, or one) to ``on_events``.

    The stream is made first if no service has made it yet (idempotent, as every service does).
    """
    await bus.ensure_stream()
    filters = trigger_filters(batching=bus.settings.batching)

    async def on_message(msg: Msg) -> None:
        events = record_events(msg)
        if events:
            await on_events(events)

    return [
        await bus_call(
            bus.js.subscribe(
                filters[0],
                stream=STREAM,
                cb=on_message,
                ordered_consumer=True,
                deliver_policy=api.DeliverPolicy.NEW,
                config=api.ConsumerConfig(filter_subjects=filters),
            )
        )
    ]


async def stop_following(subscriptions: list[Subscription]) -> None:
    for subscription in subscriptions:
        try:
            await bus_call(subscription.unsubscribe())
        except BusError:
            pass  # the connection is closing: nothing left to undo
