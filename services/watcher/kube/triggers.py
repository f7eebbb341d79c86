"""What tells the Kubernetes status writer that a workload changed: every decision and fact.

The writer follows them from the event stream with ordered consumers that start at the next
event, not with core subscriptions on the event subjects: on a secured bus a user may
subscribe only on its own inbox (shared/auth.py), and a JetStream consumer delivers there.
Missing an event is harmless (the writer starts, and restarts, with a full round), so a
consumer that dies with a NATS node is simply made again by nats-py's ordered consumer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

from shared.bus import STREAM, Bus, BusError, bus_call

# What marks a workload dirty: every decision and fact about it.
TRIGGERS = ("berth.cq.>", "berth.wl.>")


async def follow_triggers(
    bus: Bus, on_event: Callable[[Msg], Awaitable[None]]
) -> list[Subscription]:
    """One ordered consumer per trigger subject, delivering new events to ``on_event``.

    The stream is made first if no service has made it yet (idempotent, as every service does).
    """
    await bus.ensure_stream()
    return [
        await bus_call(
            bus.js.subscribe(
                subject,
                stream=STREAM,
                cb=on_event,
                ordered_consumer=True,
                deliver_policy=api.DeliverPolicy.NEW,
            )
        )
        for subject in TRIGGERS
    ]


async def stop_following(subscriptions: list[Subscription]) -> None:
    for subscription in subscriptions:
        try:
            await bus_call(subscription.unsubscribe())
        except BusError:
            pass  # the connection is closing: nothing left to undo
