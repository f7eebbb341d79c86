"""A key-value bucket's changes, delivered by an ordered push consumer this module owns.

Why not nats-py's ``kv.watchall()``: its ordered consumer is re-created only when its own
heartbeat check notices a gap or silence, so a watch stayed deaf for seconds after the
connection failed over to another NATS node; resuming it sooner meant reaching into nats-py's
private fields. Here the consumer is ours: it is re-created from the next revision at once on
a reconnect, on a gap in its sequence, or when its heartbeats stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import NamedTuple

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api
from nats.js.kv import KeyValue

from shared.bus.buckets import Bucket
from shared.logging import get_logger

__all__ = ["WATCH_HEARTBEAT_S", "KeyWatch", "Position", "position"]

log = get_logger("bus")

WATCH_QUEUE = 256  # entries waiting for the follow loop; a full queue slows the consumer
# The server sends a heartbeat this often while a watch is idle; silence for
# WATCH_SILENCE_BEATS beats means the consumer is gone (its node died) and it is re-created.
WATCH_HEARTBEAT_S = 0.5
WATCH_SILENCE_BEATS = 3
WATCH_INACTIVE_S = 60.0  # the server removes the consumer of a watch this long unread
# A re-creation asks JetStream with this timeout, not nats-py's 5 s: while a killed node's
# groups elect leaders a request can go unanswered, and the next try should not wait long.
WATCH_API_TIMEOUT_S = 1.0
KV_OPERATION = "KV-Operation"
MARKER_REASON = "Nats-Marker-Reason"  # nats-server 2.11+: an expiry marker's operation
MARKER_OPERATIONS = {"MaxAge": "PURGE", "Purge": "PURGE", "Remove": "DEL"}


class Position(NamedTuple):
    """Where a delivered message stands: what a watch reads of nats-py's ``Msg.metadata``."""

    consumer: int  # the consumer's sequence (a gap: a message lost on the way)
    stream: int  # the stream's sequence: the key's revision
    pending: int  # messages still to come
    nanos: int  # when it was stored, ns since the epoch


def position(reply: str) -> Position:
    """A JetStream message's :class:`Position` from its ack reply subject, read as
    ``Msg.metadata`` reads it (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
    seq>.<ns>.<pending>``, or with a domain and an account hash after ``ACK``: 11 tokens or
    more), without its two dataclasses and a datetime for every message a watch gets: most
    are skipped or need no time. Anything else raises ``NotJSMessageError``, as it does."""
    tokens = reply.split(".")
    if tokens[0] == "$JS" and len(tokens) > 1 and tokens[1] == "ACK":
        if len(tokens) == 9:
            return Position(int(tokens[6]), int(tokens[5]), int(tokens[8]), int(tokens[7]))
        if len(tokens) >= 11:
            return Position(int(tokens[8]), int(tokens[7]), int(tokens[10]), int(tokens[9]))
    raise nats.errors.NotJSMessageError


def stored_at(nanos: int) -> datetime:
    """:attr:`Position.nanos` as the datetime ``Msg.metadata.timestamp`` makes of it."""
    return datetime.fromtimestamp(nanos / 1_000_000_000.0, UTC)


class KeyWatch:
    """Every key of a bucket: the entries that exist, then a None marker, then each change.

    Owns its consumer, its subscription and its watchdog task; :meth:`stop` ends all three.
    """

    def __init__(self, bucket: Bucket, *, queue: int = WATCH_QUEUE) -> None:
        self.bucket = bucket
        self.queue: asyncio.Queue[KeyValue.Entry | None] = asyncio.Queue(maxsize=queue)
        self.next_revision = 0  # the stream sequence a new consumer starts from (0: the start)
        self.initial_done = False
        self._consumer_seq = 0  # the last consumer sequence delivered, to notice gaps
        self._generation = 0  # which consumer the subscription callback belongs to
        self._created = asyncio.Event()
        self._subscription: Subscription | None = None
        self._consumer = ""
        self._last_heard = time.monotonic()
        self._restart = asyncio.Event()
        self._why = ""  # what set _restart, for the log line
        self._watchdog: asyncio.Task[None] | None = None
        self._stopped = False

    async def start(self) -> None:
        await self._create()
        self.bucket.reconnects.add(self._reconnected)
        self._watchdog = asyncio.create_task(self._watch_over(), name="bus.kv-watch")

    def _reconnected(self) -> None:
        self._restart_for("reconnected")

    def _restart_for(self, why: str) -> None:
        """Have the watchdog re-create the consumer now."""
        self._why = why
        self._restart.set()

    async def next(self, *, wait: float) -> KeyValue.Entry | None:
        """The next entry or marker; ``TimeoutError`` if none came within ``wait`` s."""
        return await asyncio.wait_for(self.queue.get(), wait)

    async def stop(self) -> None:
        self._stopped = True
        self.bucket.reconnects.discard(self._reconnected)
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        consumer = await self._drop_subscription()
        if consumer and self.bucket.nc.is_connected:
            # Unread, the server drops it after WATCH_INACTIVE_S anyway; this is tidiness.
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await asyncio.wait_for(
                    self.bucket.js.delete_consumer(self.bucket.stream, consumer),
                    WATCH_API_TIMEOUT_S,
                )

    # --- the consumer ----------------------------------------------------------------------

    async def _create(self, *, answer_within: float | None = None) -> None:
        """A new consumer from :attr:`next_revision` (the last entry of each key at first);
        ``answer_within``: seconds JetStream has to answer (nats-py's default if None)."""
        self._generation += 1
        generation = self._generation
        self._created.clear()
        self._consumer_seq = 0
        nc = self.bucket.nc
        inbox = nc.new_inbox()

        async def on_message(msg: Msg) -> None:
            await self._on_message(msg, generation)

        self._subscription = await nc.subscribe(inbox, cb=on_message)
        config = api.ConsumerConfig(
            deliver_subject=inbox,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            filter_subject=f"{self.bucket.prefix}>",
            flow_control=True,
            idle_heartbeat=WATCH_HEARTBEAT_S,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=WATCH_INACTIVE_S,
        )
        if self.next_revision:
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self.next_revision
        else:
            config.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
        info = await self.bucket.js.add_consumer(self.bucket.stream, config, timeout=answer_within)
        self._consumer = info.name
        self._last_heard = time.monotonic()
        delivered = info.delivered.consumer_seq if info.delivered else 0
        if not self.initial_done and not info.num_pending and not delivered:
            await self._initial_values_done()  # an empty bucket
        self._created.set()

    async def _drop_subscription(self) -> str:
        """Stop listening to the current consumer; returns its name."""
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(nats.errors.Error, ValueError):
                await subscription.unsubscribe()
        consumer, self._consumer = self._consumer, ""
        return consumer

    async def _recreate(self, reason: str) -> None:
        """A new consumer after the last revision handed over. The old one is not deleted:
        it is gone with its node, or the server removes it once unread (WATCH_INACTIVE_S),
        and asking first would hold the new one up while JetStream does not answer."""
        log.info("watch_restarted", bucket=self.bucket.name, reason=reason)
        await self._drop_subscription()
        await self._create(answer_within=WATCH_API_TIMEOUT_S)

    async def _watch_over(self) -> None:
        """Re-create the consumer at once after a reconnect, and when the server has been
        silent for several heartbeats (the consumer lived on a node that died)."""
        silence = WATCH_HEARTBEAT_S * WATCH_SILENCE_BEATS
        delay = 0.1
        while not self._stopped:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._restart.wait(), WATCH_HEARTBEAT_S)
            asked = self._restart.is_set()
            # A full queue holds the heartbeats back too: that is a slow reader, not silence.
            silent = time.monotonic() - self._last_heard > silence and not self.queue.full()
            if not (asked or silent) or not self.bucket.nc.is_connected:
                continue
            self._restart.clear()
            try:
                await self._recreate(self._why if asked else "consumer silent")
                delay = 0.1
            except (nats.errors.Error, TimeoutError) as error:
                # JetStream not answering yet (a stream electing its leader): try again soon.
                log.warning("watch_not_resumed", bucket=self.bucket.name, error=repr(error))
                self._restart_for("retry")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    # --- what arrives ----------------------------------------------------------------------

    async def _on_message(self, msg: Msg, generation: int) -> None:
        await self._created.wait()
        if generation != self._generation:
            return  # a message of a consumer already replaced
        self._last_heard = time.monotonic()
        headers = msg.headers or {}
        if not msg.reply.startswith("$JS.ACK."):
            if headers.get("Status") == "100":
                await self._on_control(msg, headers)
            else:  # the server ended the consumer (409 Consumer Deleted, say): a new one
                self._restart_for(f"status {headers.get('Status')}")
            return
        meta = position(msg.reply)
        if meta.consumer != self._consumer_seq + 1:
            self._restart_for("gap")  # a message was lost on the way: start after the last
            return
        self._consumer_seq = meta.consumer
        if meta.stream < self.next_revision:
            # Already handed over by the consumer this one replaced.
            if meta.pending == 0:
                await self._initial_values_done()
            return
        self.next_revision = meta.stream + 1
        operation = headers.get(KV_OPERATION)
        if operation is None and MARKER_REASON in headers:
            operation = MARKER_OPERATIONS.get(headers[MARKER_REASON])
            if operation is None:  # a marker of a kind nats-server may add later: not a key
                if meta.pending == 0:
                    await self._initial_values_done()
                return
        entry = KeyValue.Entry(
            bucket=self.bucket.name,
            key=msg.subject[len(self.bucket.prefix) :],
            value=msg.data,
            revision=meta.stream,
            delta=meta.pending,
            created=stored_at(meta.nanos),  # type: ignore[arg-type]  # nats-py's own watch does so
            operation=operation,
        )
        await self.queue.put(entry)
        if meta.pending == 0:
            await self._initial_values_done()

    async def _on_control(self, msg: Msg, headers: dict[str, str]) -> None:
        """A heartbeat or a flow-control request (status 100): answer flow control; a
        heartbeat naming a later consumer sequence than ours means we missed messages."""
        if msg.reply:
            await self.bucket.nc.publish(msg.reply, b"")  # flow control: carry on
        stalled = headers.get("Nats-Consumer-Stalled")
        if stalled:
            await self.bucket.nc.publish(stalled, b"")
        last = headers.get("Nats-Last-Consumer")
        if last is not None and int(last) != self._consumer_seq:
            self._restart_for("gap")

    async def _initial_values_done(self) -> None:
        if not self.initial_done:
            self.initial_done = True
            await self.queue.put(None)
