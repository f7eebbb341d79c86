"""The per-workload copies of a round (:func:`send_copies`, used by
``Publishing.publish_copies``) and plain messages such as key-value puts (:func:`send_puts`,
used by ``AckTracker.send_many``) framed here, not by nats-py's ``Client.publish``.

Why: nats-py builds each message's header block in Python, key by key (a strip, a regex
match, an encode and a newline translation per key and per value), then checks the subject
and the connection again for each message. A copy has two headers, its id and the copy mark,
and a round sends one copy per event: that was most of what publishing a round cost its
service (the watcher profile of issue 20: 11.8 % of its CPU in ``publish_copies``); a plain
message pays the same checks and a formatted command line. Here a message's command is one
bytes formatting, appended to the client's outgoing buffer as its ``publish`` does, and the
flusher is woken once for the round.

Only where nats-py would send the same bytes: a copy whose fields could break the frame
(:func:`copy_frame`), or a client not plainly connected (reconnecting, draining, closed: its
``publish`` decides to buffer or refuse), goes through ``Client.publish`` as before.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client

from shared.bus.batches import COPY_HEADER
from shared.bus.current import CurrentClient

__all__ = ["copy_frame", "copy_headers", "put_frame", "send_copies", "send_puts"]

_UNSAFE_SUBJECT = re.compile(r"[ \t\r\n]")  # as nats-py refuses: it would split the command
_COPY_TAIL = f"\r\n{COPY_HEADER}: 1\r\n\r\n".encode()
_HEADER_HEAD = b"NATS/1.0\r\nNats-Msg-Id: "


def copy_frame(subject: str, payload: bytes, msg_id: str) -> bytes | None:
    """The ``HPUB`` command of one copy, byte for byte what ``Client.publish(subject, payload,
    headers={"Nats-Msg-Id": msg_id, "Berth-Copy": "1"})`` sends; None when that call must
    judge it: an empty subject or one with white space (nats-py refuses it), an id with a
    line break or white space at either end (nats-py rewrites it), or an id that is not ASCII
    (its length in bytes differs)."""
    if not subject or _UNSAFE_SUBJECT.search(subject):
        return None
    if not msg_id.isascii() or "\r" in msg_id or "\n" in msg_id or msg_id != msg_id.strip():
        return None
    header = _HEADER_HEAD + msg_id.encode() + _COPY_TAIL
    size = len(header)
    return b"HPUB %s  %d %d\r\n%s%s\r\n" % (
        subject.encode(),
        size,
        size + len(payload),
        header,
        payload,
    )


def put_frame(subject: str, payload: bytes, reply: str) -> bytes | None:
    """The ``PUB`` command of a message without headers, byte for byte what
    ``Client.publish(subject, payload, reply=reply)`` sends; None when that call must judge
    it: an empty subject, or white space in the subject or the reply (nats-py refuses it)."""
    if not subject or _UNSAFE_SUBJECT.search(subject) or _UNSAFE_SUBJECT.search(reply):
        return None
    return b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), len(payload), payload)


async def send_copies(nc: Client, copies: Sequence[tuple[str, bytes, str]]) -> None:
    """Publish the copies (subject, payload, message id), in order, without acks; raises
    what ``Client.publish`` raises (``nats.errors.Error``)."""

    async def publish(client: Client, subject: str, payload: bytes, msg_id: str) -> None:
        await client.publish(subject, payload, headers=copy_headers(msg_id))

    await _send(nc, copies, copy_frame, publish)


async def send_puts(nc: Client, messages: Sequence[tuple[str, bytes, str]]) -> None:
    """Publish messages without headers (subject, payload, reply subject), in order; raises
    what ``Client.publish`` raises (``nats.errors.Error``)."""

    async def publish(client: Client, subject: str, payload: bytes, reply: str) -> None:
        await client.publish(subject, payload, reply=reply)

    await _send(nc, messages, put_frame, publish)


async def _send(
    nc: Client,
    messages: Sequence[tuple[str, bytes, str]],
    frame: Callable[[str, bytes, str], bytes | None],
    publish: Callable[[Client, str, bytes, str], Awaitable[None]],
) -> None:
    """Each message framed by ``frame`` and queued, or, where it answers None (or the
    payload is over the server's limit, or the client is not plainly connected), sent by
    ``publish`` (nats-py's), in order; the flusher woken once."""
    client = _client_of(nc)
    if not _plainly_connected(client):
        for subject, payload, extra in messages:
            await publish(client, subject, payload, extra)
        return
    limit = client.max_payload
    framed = 0
    for subject, payload, extra in messages:
        command = frame(subject, payload, extra) if len(payload) <= limit else None
        if command is None:
            await publish(client, subject, payload, extra)
        else:
            await _append(client, command, len(payload))
            framed += 1
    await _wake_flusher(client, framed)


def _client_of(nc: Client) -> Client:
    return nc.client if isinstance(nc, CurrentClient) else nc


async def _append(client: Client, frame: bytes, payload_size: int) -> None:
    """Queue one framed command, counted in the client's stats, as ``publish`` does."""
    client.stats["out_msgs"] += 1
    client.stats["out_bytes"] += payload_size
    await client._send_command(frame)  # as publish: flushed at once past its pending limit


async def _wake_flusher(client: Client, framed: int) -> None:
    """After commands were queued: wake the flusher, as each ``publish`` does, once."""
    if framed and client._flush_queue is not None and client._flush_queue.empty():
        await client._flush_pending()


def copy_headers(msg_id: str) -> dict[str, str]:
    """A copy's headers as ``Client.publish`` takes them: its id, and the copy mark."""
    return {"Nats-Msg-Id": msg_id, COPY_HEADER: "1"}


def _plainly_connected(client: Client) -> bool:
    """Connected, not draining or closed, with the internals this module appends to."""
    return (
        client.is_connected
        and not client.is_draining
        and hasattr(client, "_send_command")
        and hasattr(client, "_flush_queue")
    )
