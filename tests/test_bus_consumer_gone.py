"""A pull consumer the server no longer has (shared/bus/pulling.py): deleted, or removed once
it went unread past its inactive threshold (a connection that hung that long). Its pump must
stop with ``ConsumerGone`` rather than ask again and again, each request answered "no
consumer" at once while nothing is read and the service looks ready; and a "no consumer"
answer while the server still has it (no leader for a moment) must change nothing.
Against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.bus import STREAM, ConsumerGone
from shared.bus.pulling import (
    CONSUMER_CHECK_S,
    CONSUMER_INACTIVE_S,
    UNANSWERED_RETRY_S,
    PullPump,
    consumer_may_be_gone,
)
from shared.events import AnyEvent
from tests.unbatched_bus import _bus, _submitted

# (status, description, whether the consumer may be gone, why)
STATUS_CASES = [
    ("503", "", True, "no responders: no consumer took the request"),
    ("409", "Consumer Deleted", True, "the server deleted it under the request"),
    ("409", "Exceeded MaxWaiting", False, "too many requests waiting: the consumer is there"),
    ("408", "Request Timeout", False, "a request that expired"),
    ("100", "Idle Heartbeat", False, "a heartbeat"),
]


def _status(status: str, description: str) -> Msg:
    return Msg(None, headers={"Status": status, "Description": description})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "description", "gone", "why"), STATUS_CASES, ids=[c[3] for c in STATUS_CASES]
)
def test_which_answers_say_no_consumer(status: str, description: str, gone: bool, why: str) -> None:
    assert consumer_may_be_gone(status, _status(status, description)) == gone, why


async def test_a_deleted_consumer_stops_its_reader_without_asking_on(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: list[str] = []
    heard = PullPump._on_message

    async def counting(pump: PullPump, msg: Msg) -> None:
        if (status := JetStreamContext.is_status_msg(msg)) not in (None, "100"):
            answers.append(status)
        await heard(pump, msg)

    monkeypatch.setattr(PullPump, "_on_message", counting)
    bus = await _bus(nats_url)
    try:
        subscription = await bus.replay_subscription(["berth.wl.submitted.>"])
        first = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            first.set()

        reading = asyncio.create_task(bus.consume(subscription, handler, stopping=asyncio.Event()))
        await bus.publish(_submitted(1))
        await asyncio.wait_for(first.wait(), 20)
        info = await subscription.consumer_info()
        await bus.js.delete_consumer(STREAM, info.name)
        with pytest.raises(ConsumerGone):
            await asyncio.wait_for(reading, 20)
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await bus.close()
    # Asked again every UNANSWERED_RETRY_S until the server is asked (after CONSUMER_CHECK_S):
    # about twenty answers. Before, each was met by a new request at once: thousands a second.
    assert len(answers) <= 2 * CONSUMER_CHECK_S / UNANSWERED_RETRY_S, len(answers)


async def test_no_consumer_for_a_moment_changes_nothing(nats_url: str) -> None:
    """A "no responders" answer while the server still has the consumer (in a cluster, no
    leader for a moment): once silent, the pump asks the server, finds it, asks for more and
    reads on."""
    bus = await _bus(nats_url)
    try:
        subscription = await bus.replay_subscription(["berth.wl.submitted.>"])
        handled: list[AnyEvent] = []
        first, second = asyncio.Event(), asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(events)
            uids = {event.workload.uid for event in handled}
            if "u1" in uids:
                first.set()
            if {"u1", "u2"} <= uids:
                second.set()  # (a delivery asked for again may come twice: handlers are idempotent)

        reading = asyncio.create_task(bus.consume(subscription, handler, stopping=second))
        await bus.publish(_submitted(1))
        await asyncio.wait_for(first.wait(), 20)  # the consumer's own pump is reading
        pump: PullPump = bus._pumps[id(subscription)]
        await pump._on_message(_status("503", ""))
        assert pump.unanswered_since is not None and pump.requested == 0
        pump.last_request = pump.last_heard = 0.0  # silent since: the watchdog acts now
        await pump._watchdog()  # the server still has it: asked again
        assert pump.requested > 0
        await bus.publish(_submitted(2))
        await asyncio.wait_for(reading, 20)
        assert list(dict.fromkeys(event.workload.uid for event in handled)) == ["u1", "u2"]
        assert pump.unanswered_since is None  # a delivery shows a consumer holds our requests
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await bus.close()


async def test_no_consumer_for_its_whole_inactive_threshold_is_gone(nats_url: str) -> None:
    """Answered "no consumer" for as long as the server would keep an unread consumer, and
    the server cannot say (an R1 consumer whose node is down): taken for gone, so that the
    service starts again rather than ask on for as long as the node stays down."""
    bus = await _bus(nats_url)
    try:
        subscription = await bus.replay_subscription(["berth.wl.submitted.>"])
        pump: PullPump = await bus._pump(subscription)
        await pump._on_message(_status("503", ""))
        assert pump.unanswered_since is not None
        pump.unanswered_since -= CONSUMER_INACTIVE_S + 1
        pump.last_request = pump.last_heard = 0.0
        with pytest.raises(ConsumerGone):
            await pump._watchdog()
    finally:
        await bus.close()
