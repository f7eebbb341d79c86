"""The bus's errors: unanswered publishes time out, and nats-py's errors leave the bus as
its own family, in a table and against a real nats-server."""

import asyncio

import nats.errors
import nats.js.errors
import pytest

from shared.bus import (
    BucketNotFound,
    BusError,
    BusTimeout,
    KeyExists,
    KeyNotFound,
    NoResponders,
    NotFound,
    Refused,
    translated,
)
from shared.bus.acks import AckTimeout, AckTracker, PublishRefused
from tests.unbatched_bus import _bus


async def test_unanswered_publish_times_out(nats_url: str) -> None:
    """A publish nobody acks (a plain subscriber, not a stream) fails with AckTimeout after
    the tracker's timeout instead of waiting forever; one with no listener at all is refused."""
    bus = await _bus(nats_url)
    try:
        silent = await bus.nc.subscribe("silent.subject")
        tracker = AckTracker(bus.nc, timeout=0.3)
        future = await tracker.send("silent.subject", b"x", {})
        with pytest.raises(AckTimeout):
            await asyncio.wait_for(future, 3)
        nobody = await tracker.send("nobody.listens", b"x", {})
        with pytest.raises(PublishRefused) as refused:
            await asyncio.wait_for(nobody, 3)
        assert refused.value.code == 503
        await tracker.close()
        await silent.unsubscribe()
    finally:
        await bus.close()


TRANSLATIONS = [
    (nats.js.errors.KeyWrongLastSequenceError(), KeyExists, "a compare-and-swap lost"),
    (nats.js.errors.KeyNotFoundError(), KeyNotFound, "no such key"),
    (nats.js.errors.KeyDeletedError(), KeyNotFound, "a deleted key is not found either"),
    (nats.js.errors.NoKeysError(), KeyNotFound, "a bucket with no key at all"),
    (nats.js.errors.BucketNotFoundError(), BucketNotFound, "no such bucket"),
    (nats.js.errors.NotFoundError(), NotFound, "no such stream, consumer or message"),
    (nats.errors.NoRespondersError(), NoResponders, "nobody serves the subject"),
    (nats.js.errors.ServiceUnavailableError(), NoResponders, "JetStream has no leader yet"),
    (nats.errors.TimeoutError(), BusTimeout, "nats-py's timeout"),
    (TimeoutError(), BusTimeout, "asyncio's timeout around a call"),
    (nats.js.errors.BadRequestError(), Refused, "JetStream said no"),
    (nats.errors.ConnectionClosedError(), BusError, "anything else nats-py raises"),
]


@pytest.mark.parametrize(("error", "family", "reason"), TRANSLATIONS)
def test_nats_errors_leave_the_bus_as_its_own(
    error: Exception, family: type[BusError], reason: str
) -> None:
    """Each nats-py error becomes the most specific error of the bus's family, the original
    chained as its cause."""
    with pytest.raises(family) as raised, translated():
        raise error
    assert type(raised.value) is family, reason
    assert raised.value.__cause__ is error


async def test_buckets_and_requests_raise_the_family(nats_url: str) -> None:
    """Against a real server: a missing key, a create of an existing key, a missing bucket
    and a request nobody serves each raise the bus's error, not nats-py's."""
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("family-test")
        with pytest.raises(KeyNotFound):
            await kv.get("absent")
        await kv.create("k", b"1")
        with pytest.raises(KeyExists):
            await kv.create("k", b"2")
        with pytest.raises(KeyExists):
            await kv.update("k", b"3", last=999)
        with pytest.raises(BucketNotFound):
            await bus.existing_kv("never-made")
        with pytest.raises(NoResponders):
            await bus.request("berth.api.nobody.here", b"{}", wait=1.0)
    finally:
        await bus.close()
