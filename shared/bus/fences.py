"""A consumer's fence from the markers stored before its resume point (shared/fencing.py
holds the fence's rules; reading them from the stream is the bus's part)."""

from __future__ import annotations

import asyncio

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.bus.errors import NotFound, translated
from shared.events import decode_event
from shared.fencing import LEASE_SUBJECTS, Fence

__all__ = ["MARKER_READ_TIMEOUT_S", "fence_before"]

MARKER_READ_TIMEOUT_S = 30.0  # reading the markers before a resume point takes at most this


async def fence_before(js: JetStreamContext, *, stream: str, sequence: int) -> Fence:
    """The fence of a reader whose first message is at stream ``sequence``: every marker
    stored before it, read in order by a short-lived ordered consumer on ``berth.lease.>``.

    Why every marker and not the last one per role: the last marker may lie after the resume
    point, and the one before it is not necessarily the highest term (a slow candidate's
    marker can land after its successor's). Markers are few (one per change of leader), and
    the consumer gets them all in one stream of messages, not one request each.
    """
    fence = Fence()
    if sequence <= 1:
        return fence
    try:  # any marker at all before the resume point? (a consumer on none would wait)
        with translated():
            first = await js.get_msg(stream, seq=1, subject=LEASE_SUBJECTS, next=True)
    except NotFound:
        return fence
    if first.seq is None or first.seq >= sequence:
        return fence
    done = asyncio.Event()

    async def on_marker(message: Msg) -> None:
        if done.is_set():
            return
        metadata = message.metadata
        if metadata.sequence.stream >= sequence:
            done.set()
            return
        try:
            fence.judge(decode_event(message.data))
        except msgspec.DecodeError:
            pass
        if metadata.num_pending == 0:
            done.set()

    with translated():
        subscription = await js.subscribe(
            LEASE_SUBJECTS, stream=stream, cb=on_marker, ordered_consumer=True
        )
        try:
            await asyncio.wait_for(done.wait(), MARKER_READ_TIMEOUT_S)
        finally:
            await subscription.unsubscribe()
    return fence
