"""A round of acked publishes (``AckTracker.send_many``): a refused one keeps no future."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest

from shared.bus import Bus
from shared.bus.acks import AckTracker, PublishRefused
from shared.bus.settings import BusSettings
from tests.conftest import bus_auth


async def test_a_failed_send_many_keeps_no_future(nats_url: str) -> None:
    """A publish of the round refused (a subject nats-py rejects): the round raises, and none
    of its futures waits for an ack (none is swept later as a timeout either)."""
    bus = await Bus.connect(
        nats_url, source="test", auth=bus_auth(nats_url), settings=BusSettings()
    )
    tracker = AckTracker(bus.nc, timeout=30)
    try:
        with pytest.raises(nats.errors.BadSubjectError):
            await tracker.send_many([("ok.a", b"1", None), ("bad subject", b"2", None)])
        assert tracker._pending == {}
        [ack] = await tracker.send_many([("no.stream.here", b"3", None)])
        with pytest.raises(PublishRefused):  # the tracker still works: no stream answers
            await asyncio.wait_for(ack, 10)
    finally:
        await tracker.close()
        await bus.close()
