"""Pipelined JetStream publishes: many in flight on one connection, each ack matched to its
publish by the reply subject.

Why not nats-py's own calls: ``js.publish`` awaits one round trip per message, with a timer
and a ``wait_for`` each; ``js.publish_async`` pipelines, but pays a timer-free future plus a
semaphore and a random token per message, and its reply handler *raises* on an error reply
instead of failing the future, so a refused publish (a compare-and-swap that lost) hung until
the caller's own timeout; and both cost the busiest service much of its CPU. Here a publish
is a future in a dict; one sweeper task fails the ones whose ack did not come in time (in
send order, so it stops at the first still in time).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.bus.errors import BusTimeout, Refused
from shared.logging import get_logger

__all__ = [
    "BATCH_DISABLED",
    "BATCH_REFUSALS",
    "NO_RESPONDERS",
    "WRONG_LAST_SEQUENCE",
    "Ack",
    "AckTimeout",
    "AckTracker",
    "PublishRefused",
]

# The fast batch's reply subject, after its token (the batch id): the flow-control window
# asked for (the stream's own cap), "fail" (a gap ends the batch: what the commit's ack
# counts was stored, nothing after it), the message's place, its operation, the marker.
_BATCH_WINDOW = 500
_BATCH_SUFFIX = "$FI"
_START, _APPEND, _COMMIT = 0, 1, 2

log = get_logger("bus")

WRONG_LAST_SEQUENCE = 10071  # JetStream's err_code for a failed compare-and-swap
NO_RESPONDERS = 503  # no stream listens on the subject (yet)
# JetStream's err_codes for a fast batch refused as a whole (not its first message).
BATCH_DISABLED = 10205  # the stream does not take fast batches
BATCH_BAD_PATTERN = 10206  # the reply subject's batch fields do not parse
BATCH_BAD_ID = 10207  # the batch id is not one (too long, say)
BATCH_UNKNOWN = 10208  # no such batch (ended already, or dropped after inactivity)
BATCH_TOO_MANY = 10211  # too many batches in flight on the stream or the server
BATCH_REFUSALS = frozenset(
    {BATCH_DISABLED, BATCH_BAD_PATTERN, BATCH_BAD_ID, BATCH_UNKNOWN, BATCH_TOO_MANY}
)


class PublishRefused(Refused):
    """The server answered the publish with an error (``code`` 503: no stream took it);
    ``place``: in a fast batch, the message it answered (from 1), else 0."""

    def __init__(self, code: int, err_code: int, description: str, place: int = 0) -> None:
        super().__init__(f"publish refused: {description} (code {code}, err_code {err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description
        self.place = place


def _batch_reply(token: str, data: bytes) -> tuple[str, int] | None:
    """A fast batch's reply: (batch id, place of the message it answers), or place 0 when it
    does not end the batch. Flow control does not; nor does a message's refusal within the
    batch, which goes on: its next message finds the gap, and the commit's ack then counts
    what was stored. A refusal of its first message (no batch began) or of its commit (no
    ack will come) ends it. None: not a batch reply at all (a subject under the inbox that
    merely ends in the marker), which no pending batch waits for."""
    batch, _, rest = token.partition(".")  # rest: <window>.fail.<place>.<op>.$FI
    parts = rest.split(".")
    if len(parts) != 5 or not parts[2].isdigit():
        return None
    if data[:8] == b'{"type":':
        return batch, 0
    place, op = parts[2], parts[3]
    if data[:9] == b'{"error":' and place != "1" and op != str(_COMMIT):
        return batch, 0
    return batch, int(place)


class AckTimeout(BusTimeout):
    """No ack came in time: the publish may or may not have been stored."""


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class Ack(msgspec.Struct):
    """What the stream answered: where the message went, or why not."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None
    batch: str = ""  # a fast batch's id, and how many of its messages the stream stored
    count: int = 0


_decode_ack = msgspec.json.Decoder(Ack).decode


class AckTracker:
    """Owns the reply subscription and the sweeper task of one connection's publishes."""

    def __init__(self, nc: Client, *, timeout: float) -> None:
        self.nc = nc
        self.timeout = timeout
        self.prefix = ""
        self._batch_tag = ""  # the inbox's own token: batch ids unique beyond this connection
        self._tokens = itertools.count()
        # token -> (future, deadline); insertion order is send order, so deadlines ascend.
        self._pending: dict[str, tuple[asyncio.Future[Ack], float]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def send(
        self, subject: str, payload: bytes, headers: dict[str, str] | None
    ) -> asyncio.Future[Ack]:
        """Publish (``headers`` None: a plain message, as ``kv.put`` sends); the returned
        future holds the ack, or ``PublishRefused`` / ``AckTimeout``."""
        if self._sweeper is None:
            await self._start()
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Ack] = loop.create_future()
        self._pending[token] = (future, loop.time() + self.timeout)
        try:
            await self.nc.publish(subject, payload, reply=self.prefix + token, headers=headers)
        except nats.errors.Error:
            self._pending.pop(token, None)
            raise
        return future

    async def send_many(
        self, messages: Sequence[tuple[str, bytes, dict[str, str] | None]]
    ) -> list[asyncio.Future[Ack]]:
        """:meth:`send` for many (subject, payload, headers), in order, with one clock reading
        for their deadlines. If a publish fails, none of these futures is kept (their acks
        are ignored) and it raises."""
        if self._sweeper is None:
            await self._start()
        tokens = [str(next(self._tokens)) for _ in messages]
        futures = self._register(tokens)
        prefix, publish = self.prefix, self.nc.publish  # a CurrentClient's: the client of now
        try:
            for (subject, payload, headers), token in zip(messages, tokens, strict=True):
                await publish(subject, payload, reply=prefix + token, headers=headers)
        except nats.errors.Error:
            self._forget(tokens)
            raise
        return futures

    def _register(self, tokens: list[str]) -> list[asyncio.Future[Ack]]:
        """A future per token, all with one deadline (one clock reading), for their replies."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        futures: list[asyncio.Future[Ack]] = []
        for token in tokens:
            future: asyncio.Future[Ack] = loop.create_future()
            self._pending[token] = (future, deadline)
            futures.append(future)
        return futures

    def _forget(self, tokens: list[str]) -> None:
        """Publishes that failed to go out: no reply is waited for (their futures are dropped
        unread; the caller gets the error that stopped them)."""
        for token in tokens:
            self._pending.pop(token, None)

    async def send_batches(
        self, batches: Sequence[Sequence[tuple[str, bytes]]]
    ) -> list[asyncio.Future[Ack]]:
        """Publish each list of (subject, payload) as one fast batch into a stream that allows
        them; each future holds its commit's ack (``count``: how many were stored, the first
        ones; the rest were not), or ``PublishRefused`` (the batch or its first message
        refused) / ``AckTimeout`` (unknown). Flow control is not waited for: a batch is sent
        whole, and a message the stream did not take ends it there (a gap), which the count
        says. An empty batch is refused (``ValueError``: no commit, no ack would come). If a
        publish fails, none of these futures is kept (their acks are ignored; as
        :meth:`send_many`) and it raises."""
        if not all(batches):
            raise ValueError("a fast batch needs at least one message")
        if self._sweeper is None:
            await self._start()
        tokens = [f"{self._batch_tag}{next(self._tokens)}" for _ in batches]
        futures = self._register(tokens)
        prefix, publish = self.prefix, self.nc.publish
        try:
            for messages, token in zip(batches, tokens, strict=True):
                reply, last = f"{prefix}{token}.{_BATCH_WINDOW}.fail.", len(messages)
                for seq, (subject, payload) in enumerate(messages, 1):
                    op = _COMMIT if seq == last else _START if seq == 1 else _APPEND
                    await publish(subject, payload, f"{reply}{seq}.{op}.{_BATCH_SUFFIX}")
        except nats.errors.Error:
            self._forget(tokens)
            raise
        return futures

    async def _start(self) -> None:
        await self._subscribe()
        self._sweeper = asyncio.create_task(self._sweep(), name="bus.ack-sweeper")

    async def resubscribe(self) -> None:
        """The connection signed in anew (a new nats-py client, shared/bus/connection.py):
        replies come to a new inbox. No reply can come for the publishes still waiting on the
        old one: they fail now as timed out, and their senders retry them at once with the
        same message id (stored once), rather than after the whole timeout."""
        if self._sweeper is None:
            return
        await self._subscribe()
        self.lost("the connection signed in anew: no reply")

    def lost(self, why: str) -> None:
        """Fail every publish still waiting for its ack as timed out (``why``), so that its
        sender retries it now rather than after the whole timeout: the connection its reply
        would have come on is gone (reconnected, or signed in anew), and a reply sent while
        the client was away is not kept for it. A retry is stored once (an event's message id;
        a put writes the newest value again)."""
        waiting, self._pending = self._pending, {}
        for future, _ in waiting.values():
            if not future.done():
                future.set_exception(AckTimeout(why))

    async def _subscribe(self) -> None:
        """Replies come to a new inbox: a publish's to ``<inbox>.<token>``, a fast batch's to
        ``<inbox>.<batch id>.<window>.fail.<place>.<op>.$FI`` (hence ``>``)."""
        inbox = self.nc.new_inbox()
        self.prefix, self._batch_tag = inbox + ".", inbox.rpartition(".")[2] + "-"
        await self.nc.subscribe(self.prefix + ">", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        token, place = msg.subject[len(self.prefix) :], 0
        if token.endswith(_BATCH_SUFFIX) and (reply := _batch_reply(token, msg.data)):
            token, place = reply
            if not place:
                return
        held = self._pending.pop(token, None)
        if held is None or held[0].done():
            return  # timed out already (the retry carries the same message id)
        future = held[0]
        status = (msg.headers or {}).get("Status")
        if status == str(NO_RESPONDERS):
            future.set_exception(PublishRefused(NO_RESPONDERS, 0, "no stream for the subject"))
            return
        try:
            ack = _decode_ack(msg.data)
        except msgspec.DecodeError as error:
            future.set_exception(PublishRefused(0, 0, f"unreadable ack: {error}"))
            return
        if ack.error is not None:
            refused = ack.error
            future.set_exception(
                PublishRefused(refused.code, refused.err_code, refused.description, place)
            )
        else:
            future.set_result(ack)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(0.25, self.timeout / 4))
            now = loop.time()
            expired = []
            for token, (_, deadline) in self._pending.items():
                if deadline > now:
                    break
                expired.append(token)
            for token in expired:
                future, _ = self._pending.pop(token)
                if not future.done():
                    future.set_exception(AckTimeout(f"no ack within {self.timeout} s"))
            if expired:
                log.warning("acks_timed_out", count=len(expired), in_flight=len(self._pending))

    async def close(self) -> None:
        """Stop the sweeper; publishes still waiting are cancelled (nobody is left to retry)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
        for future, _ in self._pending.values():
            future.cancel()
        self._pending.clear()
