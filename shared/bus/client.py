"""``Bus``: one NATS connection with what a service does on it (publish, consume), and its
orderly end."""

from __future__ import annotations

import asyncio

import nats.errors
from nats.js import JetStreamContext

from shared.bus.consuming import Consuming
from shared.bus.publishing import Publishing

__all__ = ["Bus"]


class Bus(Publishing, Consuming):
    """One NATS connection with its JetStream context, shared by a service's tasks."""

    def interrupt_waits(self) -> None:
        """The service is stopping: loops waiting for their next batch return at once
        instead of at the end of their idle timeout."""
        self.stopping = True
        for pump in self._pumps.values():
            pump.interrupt()

    def wake(self, subscription: JetStreamContext.PullSubscription) -> None:
        """A ``next_batch`` on ``subscription`` waiting now returns at once (with what has
        arrived, maybe nothing), not at the end of its wait: something else its loop waits
        for came (its publishes' acks: services/admission/outbox.py). With none waiting, it
        changes nothing."""
        pump = self._pumps.get(id(subscription))
        if pump is not None:
            pump.wake()

    async def close(self) -> None:
        """Unsubscribe pull subscriptions, then drain the connection: a timed-out pull
        otherwise makes ``drain()`` hang for its whole timeout."""
        self.closing = True
        await self.stop_signing_in()
        await self.acks.close()
        for pump in list(self._pumps.values()):
            await pump.close()
        self._pumps.clear()
        for subscription in self._pull_subscriptions:
            try:
                await subscription.unsubscribe()
            except (nats.errors.Error, ValueError):
                pass
        self._pull_subscriptions.clear()
        if self.nc.is_connected:
            try:
                await asyncio.wait_for(self.nc.drain(), timeout=5.0)
            except (TimeoutError, nats.errors.Error):
                await self.nc.close()
        elif not self.nc.is_closed:
            await self.nc.close()
