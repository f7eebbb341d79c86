"""The message bus: NATS JetStream streams, durable consumers and key-value buckets.

Rules this module enforces so that services need not think about them:

- every publish carries ``Nats-Msg-Id`` = the event's id, and a publish that times out is
  retried with the *same* id: its outcome was unknown, and the stream's duplicate window
  drops the copy if the first attempt was in fact stored;
- hot paths publish in pipelined batches (:meth:`Bus.publish_many`), never one awaited ack at
  a time;
- consumers fetch batches, hand a whole batch to the handler, and ack only after the handler
  returned; a malformed message is logged and terminated (never redelivered forever);
- on close, pull subscriptions are unsubscribed before the connection drains (a timed-out
  ``fetch()`` otherwise makes ``drain()`` hang for its whole timeout).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from shared.events import AnyEvent, Event, decode_event, encode_event, subject_for
from shared.logging import get_logger

__all__ = [
    "CONFIG_BUCKET",
    "DEFAULT_NATS_URL",
    "JOBS_BUCKET",
    "OBJECTS_BUCKET",
    "STREAM",
    "Bus",
    "BusError",
    "nats_url_from_env",
]

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
STREAM = "BERTH"
CONFIG_BUCKET = "berth-config"  # Kueue objects applied with `berth apply`
OBJECTS_BUCKET = "berth-objects"  # the local backend's "API server": submitted Jobs and Pods
JOBS_BUCKET = "berth-jobs"  # managed jobs, owned by recovery
# Events are stored; `berth.api.>` is core request/reply (status queries) and is not.
STREAM_SUBJECTS = ("berth.wl.>", "berth.cq.>", "berth.job.>", "berth.cmd.>")
API_SUBJECT = "berth.api"
DUPLICATE_WINDOW_S = 120.0
PUBLISH_ATTEMPTS = 5

log = get_logger("bus")

Handler = Callable[[list[AnyEvent]], Awaitable[None]]


class BusError(RuntimeError):
    """The bus could not be reached or refused an operation; the cause is chained."""


def nats_url_from_env() -> str:
    return os.environ.get("BERTH_NATS_URL", DEFAULT_NATS_URL)


class Bus:
    """One NATS connection with its JetStream context, shared by a service's tasks."""

    def __init__(self, *, source: str) -> None:
        self.nc = Client()
        self.js: JetStreamContext = self.nc.jetstream()
        self.source = source
        self.closing = False  # an intended close is not worth a "disconnected" warning
        self._pull_subscriptions: list[JetStreamContext.PullSubscription] = []

    @classmethod
    async def connect(
        cls, url: str, *, source: str, connect_timeout: float = 5.0, retry: bool = True
    ) -> Bus:
        """Connect, retrying the first connection for ``connect_timeout`` seconds."""
        bus = cls(source=source)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connect_timeout
        while True:
            try:
                await bus.nc.connect(
                    url,
                    name=f"berth-{source}",
                    connect_timeout=1,
                    # A service waits for NATS and rides out outages; a CLI command fails fast
                    # (nats-py counts -1 as "forever", the initial connection included).
                    allow_reconnect=retry,
                    max_reconnect_attempts=-1 if retry else 1,
                    reconnect_time_wait=1,
                    error_cb=_log_error,
                    disconnected_cb=bus._on_disconnect,
                    reconnected_cb=_log_reconnect,
                )
                bus.js = bus.nc.jetstream()
                return bus
            except (OSError, nats.errors.Error, TimeoutError) as error:
                if not retry or loop.time() >= deadline:
                    raise BusError(f"cannot reach NATS at {url}: {error}") from error
                await asyncio.sleep(0.1)

    async def _on_disconnect(self) -> None:
        if not self.closing:
            log.warning("nats_disconnected")

    # --- setup -----------------------------------------------------------------------------

    async def ensure_stream(self) -> None:
        """Create (or update) the event stream; idempotent, every service may call it."""
        config = api.StreamConfig(
            name=STREAM,
            subjects=list(STREAM_SUBJECTS),
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
            max_msg_size=1 << 20,
            # 3 in a clustered NATS (deploy/), so the history survives losing a server.
            num_replicas=int(os.environ.get("BERTH_STREAM_REPLICAS", "1")),
        )
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError:
            # err 10058: the stream exists with another config; bring it up to date.
            await self.js.update_stream(config)

    async def kv(self, bucket: str, *, history: int = 1) -> KeyValue:
        """Open a key-value bucket, creating it on first use."""
        try:
            return await self.js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            try:
                return await self.js.create_key_value(
                    bucket=bucket,
                    history=history,
                    storage=api.StorageType.FILE,
                    replicas=int(os.environ.get("BERTH_STREAM_REPLICAS", "1")),
                )
            except nats.js.errors.BadRequestError:
                return await self.js.key_value(bucket)  # another service won the race

    # --- publishing ------------------------------------------------------------------------

    async def publish(self, event: Event) -> api.PubAck:
        """Publish one event and wait for the stream to store it (retrying on timeout)."""
        return await self._publish_raw(subject_for(event), encode_event(event), event.id)

    async def _publish_raw(self, subject: str, payload: bytes, msg_id: str) -> api.PubAck:
        headers = {"Nats-Msg-Id": msg_id}
        delay = 0.1
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            try:
                return await self.js.publish(subject, payload, timeout=2.0, headers=headers)
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError) as error:
                # Unknown outcome: retry with the same id, the duplicate window dedupes.
                if attempt == PUBLISH_ATTEMPTS:
                    raise BusError(f"publish to {subject} failed: {error!r}") from error
                log.warning("publish_retry", subject=subject, attempt=attempt, error=repr(error))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def publish_many(self, events: Sequence[Event]) -> None:
        """Publish a batch pipelined (one round trip for all), then retry any that failed."""
        if not events:
            return
        if len(events) == 1:
            await self.publish(events[0])
            return
        prepared = [(subject_for(e), encode_event(e), e.id) for e in events]
        futures: list[asyncio.Future[api.PubAck]] = []
        for subject, payload, msg_id in prepared:
            futures.append(
                await self.js.publish_async(subject, payload, headers={"Nats-Msg-Id": msg_id})
            )
        results = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), timeout=10.0
        )
        for (subject, payload, msg_id), result in zip(prepared, results, strict=True):
            if isinstance(result, BaseException):
                await self._publish_raw(subject, payload, msg_id)

    # --- consuming -------------------------------------------------------------------------

    async def durable_subscription(
        self, durable: str, subjects: Sequence[str], *, max_ack_pending: int = 20_000
    ) -> JetStreamContext.PullSubscription:
        """A durable pull consumer on some subjects: a restarted service resumes where it was."""
        config = api.ConsumerConfig(
            durable_name=durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            filter_subjects=list(subjects),
            max_ack_pending=max_ack_pending,
            ack_wait=30.0,
            max_deliver=10,
        )
        await self.js.add_consumer(STREAM, config)
        subscription = await self.js.pull_subscribe_bind(durable, stream=STREAM)
        self._pull_subscriptions.append(subscription)
        return subscription

    async def replay_subscription(
        self, subjects: Sequence[str]
    ) -> JetStreamContext.PullSubscription:
        """An ephemeral consumer reading the whole stream from its first message.

        For a service whose state is the fold of every event (admission): no acks to keep.
        """
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            filter_subjects=list(subjects),
            inactive_threshold=60.0,
        )
        subscription = await self.js.pull_subscribe("", stream=STREAM, config=config)
        self._pull_subscriptions.append(subscription)
        return subscription

    async def last_sequence(self) -> int:
        """The sequence of the newest message in the event stream (0 when empty)."""
        info = await self.js.stream_info(STREAM)
        return info.state.last_seq

    async def consume(
        self,
        subscription: JetStreamContext.PullSubscription,
        handler: Handler,
        *,
        stopping: asyncio.Event,
        batch: int = 512,
        acks: bool = True,
    ) -> None:
        """Fetch batches until ``stopping`` is set, handing each batch to ``handler``.

        The batch in hand is always finished (handled and acked) before the loop returns, so
        a SIGTERM drains in-flight work instead of dropping it.
        """
        async for messages in self.batches(subscription, stopping=stopping, batch=batch):
            events, malformed = decode_batch(messages)
            for msg in malformed:
                if acks:
                    await msg.term()  # never redeliver what can never be decoded
            try:
                await handler(events)
            except Exception:
                log.exception("handler_failed", count=len(events))
                if acks:
                    for msg in messages:
                        if msg not in malformed:
                            await msg.nak(delay=1.0)
                continue
            if acks:
                for msg in messages:
                    if msg not in malformed:  # those were terminated already
                        await msg.ack()

    async def replay_to_end(
        self,
        subscription: JetStreamContext.PullSubscription,
        fold: Callable[[list[AnyEvent]], None],
    ) -> int:
        """Fold every stored event through ``fold``; returns how many messages there were.

        For services whose state is the fold of the whole stream: they call this at start and
        decide nothing until it returns.
        """
        count = 0
        while True:
            try:
                messages = await subscription.fetch(2000, timeout=0.5)
            except TimeoutError:
                return count  # nothing (left) to replay
            fold(decode_batch(messages)[0])
            count += len(messages)
            if messages[-1].metadata.num_pending == 0:
                return count

    async def next_batch(
        self, subscription: JetStreamContext.PullSubscription, *, wait: float
    ) -> list[AnyEvent] | None:
        """The next batch of events, [] when none came within ``wait`` s, None once closed."""
        try:
            messages = await subscription.fetch(1000, timeout=wait)
        except TimeoutError:
            return []
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            return None
        return decode_batch(messages)[0]

    async def batches(
        self,
        subscription: JetStreamContext.PullSubscription,
        *,
        stopping: asyncio.Event,
        batch: int = 512,
        idle_timeout: float = 0.5,
    ) -> AsyncIterator[list[Msg]]:
        while not stopping.is_set():
            try:
                messages = await subscription.fetch(batch, timeout=idle_timeout)
            except TimeoutError:  # nats' own TimeoutError, or asyncio's from deeper down
                continue
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
                return
            yield messages

    async def close(self) -> None:
        """Unsubscribe pull subscriptions, then drain the connection."""
        self.closing = True
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


class BucketWatch:
    """A key-value bucket followed as a list+watch: the current entries, then each change."""

    def __init__(self, watcher: KeyValue.KeyWatcher) -> None:
        self._watcher = watcher

    @classmethod
    async def start(cls, kv: KeyValue) -> tuple[BucketWatch, list[KeyValue.Entry]]:
        """Begin watching; returns the watch and every entry that exists now."""
        watcher = await kv.watchall()
        initial: list[KeyValue.Entry] = []
        async for entry in watcher:
            if entry is None:  # nats-py's marker: the initial values are done
                break
            initial.append(entry)
        return cls(watcher), initial

    async def follow(
        self, handle: Callable[[KeyValue.Entry], Awaitable[None]], *, stopping: asyncio.Event
    ) -> None:
        """Hand each change to ``handle`` until ``stopping`` is set; then stop the watch."""
        try:
            while not stopping.is_set():
                try:
                    entry = await self._watcher.updates(timeout=0.5)  # type: ignore[no-untyped-call]
                except TimeoutError:
                    continue
                if entry is not None:
                    await handle(entry)
        finally:
            await self._watcher.stop()  # type: ignore[no-untyped-call]


def live_value(entry: KeyValue.Entry) -> bytes | None:
    """An entry's value, or None when the entry records a deletion."""
    if entry.operation in ("DEL", "PURGE") or not entry.value:
        return None
    return entry.value


def decode_batch(messages: Sequence[Msg]) -> tuple[list[AnyEvent], list[Msg]]:
    """Decode a fetched batch into events, and the malformed messages (logged) apart."""
    events: list[AnyEvent] = []
    malformed: list[Msg] = []
    for msg in messages:
        try:
            events.append(decode_event(msg.data))
        except msgspec.DecodeError as error:
            log.error("malformed_event", subject=msg.subject, error=str(error))
            malformed.append(msg)
    return events, malformed


async def _log_error(error: Exception) -> None:
    log.warning("nats_error", error=repr(error))


async def _log_reconnect() -> None:
    log.info("nats_reconnected")
