"""Copies framed by the bus (shared/bus/framing.py): byte for byte what nats-py's own
``publish`` sends, or left to it where it must judge; in order on a real nats-server."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.bus import Bus
from shared.bus.acks import AckTracker, PublishRefused
from shared.bus.framing import copy_frame, copy_headers, put_frame, send_copies
from shared.bus.settings import BusSettings
from tests.conftest import bus_auth


def _ours(kind: str, subject: str, payload: bytes, extra: str) -> bytes | None:
    """The bus's frame: ``extra`` is a copy's message id, or a put's reply subject."""
    if kind == "copy":
        return copy_frame(subject, payload, extra)
    return put_frame(subject, payload, extra)


async def _nats_py_frame(kind: str, subject: str, payload: bytes, extra: str) -> bytes:
    """What nats-py itself queues for the same message (a client never connected: nothing
    is sent, the command stays in its outgoing buffer)."""
    headers, reply = (copy_headers(extra), "") if kind == "copy" else (None, extra)
    client = Client()
    await client._send_publish(subject, reply, payload, len(payload), headers)
    [frame] = client._pending
    return bytes(frame)


# (copy or put, subject, payload, a copy's id or a put's reply subject, why the bus frames it)
FRAMED = [
    ("copy", "berth.wl.submitted.ns.a", b'{"id":"submitted-u1"}', "submitted-u1", "a copy"),
    ("copy", "berth.wl.started.ns.a", b"", "started-u1-2-t3", "empty, a term-stamped id"),
    ("copy", "berth.wl.finished.ns.\u00e9t\u00e9", b"{}", "finished-u1-1", "a UTF-8 subject"),
    ("copy", "berth.wl.finished.ns.a", b"x" * 70_000, "id with inner space", "space kept"),
    ("put", "$KV.berth-status.ns.a", b'{"phase":"Running"}', "_INBOX.x.1", "a status write"),
    ("put", "$KV.berth-status.ns.a", b"{}", "", "no reply subject"),
    ("put", "$KV.b.\u00e9", b"", "_INBOX.x.2", "a UTF-8 key, an empty value"),
    ("put", "$KV.b.k", b"v" * 70_000, "_INBOX.x.3", "a large value"),
]

# (copy or put, subject, a copy's id or a put's reply subject, why nats-py's publish judges it)
LEFT_TO_NATS = [
    ("copy", "", "submitted-u1", "an empty subject: refused"),
    ("copy", "berth.wl.submitted.ns a", "submitted-u1", "white space would split the command"),
    ("copy", "berth.wl.submitted.ns.a\r\nPUB x 1", "submitted-u1", "a line break injects one"),
    ("copy", "berth.wl.submitted.ns.a", "submitted-u1\r\nX: y", "a line break in a header"),
    ("copy", "berth.wl.submitted.ns.a", " submitted-u1 ", "nats-py strips the value"),
    ("copy", "berth.wl.submitted.ns.a", "submitted-\u00fc", "not ASCII: bytes differ"),
    ("put", "", "_INBOX.x.1", "an empty subject: refused"),
    ("put", "$KV.b.a b", "_INBOX.x.1", "white space in the subject"),
    ("put", "$KV.b.a", "_INBOX x", "white space in the reply"),
    ("put", "$KV.b.a", "_INBOX.x\r\nPUB y 1", "a line break in the reply"),
]


@pytest.mark.parametrize(("kind", "subject", "payload", "extra", "why"), FRAMED)
async def test_a_framed_message_is_what_nats_py_sends(
    kind: str, subject: str, payload: bytes, extra: str, why: str
) -> None:
    expected = await _nats_py_frame(kind, subject, payload, extra)
    assert _ours(kind, subject, payload, extra) == expected, why


@pytest.mark.parametrize(("kind", "subject", "extra", "why"), LEFT_TO_NATS)
def test_a_message_nats_py_must_judge_is_not_framed(
    kind: str, subject: str, extra: str, why: str
) -> None:
    assert _ours(kind, subject, b"{}", extra) is None, why


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


async def test_copies_arrive_in_order_with_their_headers(nats_url: str) -> None:
    """Framed copies and one left to nats-py (its id is stripped there) reach a subscriber in
    the order given, each with its id and the copy mark, and the connection stays usable."""
    bus = await Bus.connect(
        nats_url, source="test", auth=bus_auth(nats_url), settings=BusSettings()
    )
    try:
        got: list[Msg] = []
        done = asyncio.Event()

        async def on_copy(msg: Msg) -> None:
            got.append(msg)
            if len(got) == 4:
                done.set()

        await bus.nc.subscribe("copies.>", cb=on_copy)
        copies = [
            ("copies.a", b"1", "id-1"),
            ("copies.b", b"2", " id-2 "),  # left to nats-py
            ("copies.c", b"", "id-3"),
            ("copies.d", b"4" * 1000, "id-4"),
        ]
        await send_copies(bus.nc, copies)
        await asyncio.wait_for(done.wait(), 10)
        assert [(m.subject, m.data) for m in got] == [(s, p) for s, p, _ in copies]
        assert [m.headers for m in got] == [
            {"Nats-Msg-Id": i.strip(), "Berth-Copy": "1"} for _, _, i in copies
        ]
        await bus.nc.flush(timeout=5)  # no protocol error: the connection is still good
    finally:
        await bus.close()
