"""Copies framed by the bus (shared/bus/framing.py): byte for byte what nats-py's own
``publish`` sends, or left to it where it must judge; in order on a real nats-server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.bus import Bus
from shared.bus.framing import copy_frame, copy_headers, send_copies
from shared.bus.settings import BusSettings
from tests.conftest import bus_auth


async def _nats_py_frame(subject: str, payload: bytes, msg_id: str) -> bytes:
    """What nats-py itself queues for this copy (a client never connected: nothing is sent,
    the command stays in its outgoing buffer)."""
    client = Client()
    await client._send_publish(subject, "", payload, len(payload), copy_headers(msg_id))
    [frame] = client._pending
    return bytes(frame)


# (subject, payload, message id, why the bus frames it itself)
FRAMED = [
    ("berth.wl.submitted.ns.a", b'{"id":"submitted-u1"}', "submitted-u1", "a plain copy"),
    ("berth.wl.started.ns.a", b"", "started-u1-2-t3", "an empty payload, a term-stamped id"),
    ("berth.wl.finished.ns.\u00e9t\u00e9", b"{}", "finished-u1-1", "a UTF-8 subject"),
    ("berth.wl.finished.ns.a", b"x" * 70_000, "id with inner space", "an inner space is kept"),
]

# (subject, message id, why nats-py's publish must judge it)
LEFT_TO_NATS = [
    ("", "submitted-u1", "an empty subject: refused"),
    ("berth.wl.submitted.ns a", "submitted-u1", "white space would split the command"),
    ("berth.wl.submitted.ns.a\r\nPUB x 1", "submitted-u1", "a line break would inject one"),
    ("berth.wl.submitted.ns.a", "submitted-u1\r\nX: y", "a line break in a header value"),
    ("berth.wl.submitted.ns.a", " submitted-u1 ", "nats-py strips the value"),
    ("berth.wl.submitted.ns.a", "submitted-\u00fc", "not ASCII: the length differs in bytes"),
]


@pytest.mark.parametrize(("subject", "payload", "msg_id", "why"), FRAMED)
async def test_a_framed_copy_is_what_nats_py_sends(
    subject: str, payload: bytes, msg_id: str, why: str
) -> None:
    assert copy_frame(subject, payload, msg_id) == await _nats_py_frame(subject, payload, msg_id), (
        why
    )


@pytest.mark.parametrize(("subject", "msg_id", "why"), LEFT_TO_NATS)
def test_a_copy_nats_py_must_judge_is_not_framed(subject: str, msg_id: str, why: str) -> None:
    assert copy_frame(subject, b"{}", msg_id) is None, why


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
