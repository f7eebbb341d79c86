"""The message bus: NATS JetStream streams, durable consumers and key-value buckets.

Rules this module enforces so that services need not think about them:

- every publish carries ``Nats-Msg-Id`` = the event's id, and a publish that times out is
  retried with the *same* id: its outcome was unknown, and the stream's duplicate window
  drops the copy if the first attempt was in fact stored;
- hot paths publish in pipelined batches (:meth:`Bus.publish_many`), never one awaited ack at
  a time;
- consumers keep pull requests outstanding (:class:`_PullPump`), hand whatever has arrived to
  the handler as one batch, and ack only after the handler returned: one ack for the batch
  (durable consumers ack all up to a message); a handler that raises gets the same batch
  again here, so a later ack never covers a batch that failed; a malformed message is logged
  and skipped (never redelivered forever);
- on close, pull subscriptions are unsubscribed before the connection drains (a timed-out
  ``fetch()`` otherwise makes ``drain()`` hang for its whole timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from shared.auth import ClientAuth
from shared.events import AnyEvent, Event, decode_event, encode_event, subject_for
from shared.fencing import LEASE_SUBJECTS, MARKER_PREFIX, Fence, fence_before, screen
from shared.logging import get_logger
from shared.publishing import (
    NO_RESPONDERS,
    WRONG_LAST_SEQUENCE,
    Ack,
    AckTimeout,
    AckTracker,
    PublishRefused,
)
from shared.subjects import subject_matcher

__all__ = [
    "CONFIG_BUCKET",
    "DEFAULT_NATS_URL",
    "JOBS_BUCKET",
    "OBJECTS_BUCKET",
    "STATUS_BUCKET",
    "STREAM",
    "Bus",
    "BusError",
    "KeyUpdates",
    "SentEvents",
    "Settling",
    "nats_url_from_env",
]

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
STREAM = "BERTH"
CONFIG_BUCKET = "berth-config"  # Kueue objects applied with `berth apply`
OBJECTS_BUCKET = "berth-objects"  # the local backend's "API server": submitted Jobs and Pods
JOBS_BUCKET = "berth-jobs"  # managed jobs, owned by recovery
STATUS_BUCKET = "berth-status"  # the local backend's status of each object, owned by the watcher
# Events are stored; `berth.api.>` is core request/reply (status queries) and is not.
STREAM_SUBJECTS = ("berth.wl.>", "berth.cq.>", "berth.job.>", "berth.cmd.>", LEASE_SUBJECTS)
API_SUBJECT = "berth.api"
DUPLICATE_WINDOW_S = 120.0
PUBLISH_ATTEMPTS = 5
PUBLISH_BACKOFF_CAP_S = 2.0
# After a reconnect JetStream may take a while (streams recovering, a leader being elected)
# before publishes are answered: for this long that still counts as the outage.
OUTAGE_SETTLE_S = 30.0
PUBLISH_ACK_TIMEOUT_S = 2.0
JS_API_PREFIX = "$JS.API"  # nats-py's default; Bus never changes it
PULL_EXPIRES_S = 5.0  # an outstanding pull request lives this long, then is renewed
HANDLER_ATTEMPTS = 10  # a batch whose handler keeps raising is retried this often, then split

log = get_logger("bus")

# What a handler may leave in flight when it returns (see Bus.consume).
Settling = Awaitable[None]
Handler = Callable[[list[AnyEvent]], Awaitable[Settling | None]]
RequestHandler = Callable[[str, bytes], Awaitable[dict[str, Any]]]


class BusError(RuntimeError):
    """The bus could not be reached or refused an operation; the cause is chained."""


class SentEvents:
    """Events sent and not yet acknowledged (:meth:`Bus.send_many`)."""

    def __init__(
        self,
        bus: Bus,
        prepared: list[tuple[str, bytes, str]],
        futures: list[asyncio.Future[Ack]],
    ) -> None:
        self.bus = bus
        self.prepared = prepared  # subject, payload, message id
        self.futures = futures

    async def settle(self) -> None:
        """Wait for every ack; publish again (same id) any that failed or went unanswered."""
        for (subject, payload, msg_id), future in zip(self.prepared, self.futures, strict=True):
            try:
                await future
            except (AckTimeout, PublishRefused):
                await self.bus._publish_raw(subject, payload, msg_id)


class KeyUpdates:
    """Key updates sent and not yet acknowledged (:meth:`Bus.send_key_updates`)."""

    def __init__(self, keys: list[str], futures: list[asyncio.Future[Ack]]) -> None:
        self.keys = keys
        self.futures = futures

    async def outcomes(self) -> list[int | Exception]:
        """Each update's new revision, or ``KeyWrongLastSequenceError`` (the swap lost),
        ``AckTimeout`` (unknown, or no stream answered: read the key again) or ``BusError``."""
        outcomes: list[int | Exception] = []
        for key, future in zip(self.keys, self.futures, strict=True):
            try:
                outcomes.append((await future).seq)
            except PublishRefused as refused:
                if refused.err_code == WRONG_LAST_SEQUENCE:
                    outcomes.append(nats.js.errors.KeyWrongLastSequenceError(refused.description))
                elif refused.code == NO_RESPONDERS:
                    # The bucket's stream has no leader this instant (a NATS cluster electing
                    # one): not stored, try again, as after a timeout (and as publishes do).
                    outcomes.append(AckTimeout(f"update of {key}: {refused.description}"))
                else:
                    outcomes.append(BusError(f"update of {key} refused: {refused.description}"))
            except AckTimeout as timeout:
                outcomes.append(timeout)
        return outcomes


class _NoStream(Exception):
    """No stream answered a publish: retried like a timeout (the stream may be starting)."""


T = TypeVar("T")
JETSTREAM_OUTAGE_S = 30.0  # how long setup calls wait out an unanswering JetStream


async def _through_jetstream_outage(call: Callable[[], Awaitable[T]], *, what: str) -> T:
    """Run a setup call (a stream or bucket opened or made), retrying while JetStream does
    not answer: in a NATS cluster's first seconds, or while a killed node's Raft groups elect
    new leaders, such calls time out or find no responder, and a service that gave up there
    exited while starting. An answer that is an error (a refusal) is raised at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + JETSTREAM_OUTAGE_S
    delay = 0.1
    while True:
        try:
            return await call()
        except (
            TimeoutError,
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.js.errors.ServiceUnavailableError,
        ) as error:
            if loop.time() + delay > deadline:
                raise
            log.warning("jetstream_unanswered", what=what, error=repr(error))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


def _refused_credentials(error: BaseException) -> bool:
    """NATS answered, and said no: retrying with the same credentials cannot help."""
    text = str(error).lower()
    return "authorization violation" in text or "authentication" in text


def keep_publishing(attempt: int, *, outage: bool, stopping: bool) -> bool:
    """Whether a publish whose outcome is still unknown after ``attempt`` tries is tried again.

    A service rides out a NATS outage (the server restarting, a cluster electing a leader):
    while the connection is down or has just come back, it retries without limit, unless it
    is stopping (then its unacked batch is redelivered to the next run). Otherwise, and for a
    client that does not reconnect (the CLI), it gives up after :data:`PUBLISH_ATTEMPTS`.
    """
    return attempt < PUBLISH_ATTEMPTS or (outage and not stopping)


def nats_url_from_env() -> str:
    return os.environ.get("BERTH_NATS_URL", DEFAULT_NATS_URL)


class Bus:
    """One NATS connection with its JetStream context, shared by a service's tasks."""

    def __init__(self, *, source: str) -> None:
        self.nc = Client()
        self.js: JetStreamContext = self.nc.jetstream()
        self.source = source
        self.closing = False  # an intended close is not worth a "disconnected" warning
        self.stopping = False  # the service is stopping: a publish no longer waits out outages
        self.rides_out_outages = False  # connected with retry: publishes wait for NATS
        self._reconnected_at = float("-inf")  # loop time of the last reconnect
        self._resuming: asyncio.Task[None] | None = None
        # Told of each event that does not decode (shared.deadletter sets it; else a log line).
        self.on_malformed: Callable[[Msg, str], None] | None = None
        self._pull_subscriptions: list[JetStreamContext.PullSubscription] = []
        self._pumps: dict[int, _PullPump] = {}  # id(pull subscription) -> its pump
        self.acks = AckTracker(self.nc, timeout=PUBLISH_ACK_TIMEOUT_S)
        self._wanted: dict[int, Callable[[str], bool]] = {}  # id(pull subscription) -> filter
        self._fences: dict[int, Fence] = {}  # id(pull subscription) -> its fence
        self.term = 0  # the lease term stamped on what this bus publishes (shared/lease.py)
        # Set while this replica may act (shared/leadership.py): consumers wait while clear.
        self.acting: asyncio.Event | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        source: str,
        connect_timeout: float = 5.0,
        retry: bool = True,
        auth: ClientAuth | None = None,
    ) -> Bus:
        """Connect, retrying the first connection for ``connect_timeout`` seconds.

        ``auth``: the credentials and TLS material; by default those the environment names
        for the user called ``source`` (:meth:`ClientAuth.from_env`)."""
        bus = cls(source=source)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connect_timeout
        try:
            options = (auth or ClientAuth.from_env(source)).connect_options(url)
        except (OSError, ValueError) as error:
            raise BusError(f"cannot use the bus credentials: {error}") from error
        # "nats://a:4222,nats://b:4222": the servers of a cluster; nats-py picks one and fails
        # over to the others.
        servers = [server.strip() for server in url.split(",") if server.strip()]
        bus.rides_out_outages = retry
        while True:
            try:
                await bus.nc.connect(
                    servers,
                    **options,
                    name=f"berth-{source}",
                    connect_timeout=1,
                    # A service waits for NATS and rides out outages; a CLI command fails fast
                    # (nats-py counts -1 as "forever", the initial connection included).
                    allow_reconnect=retry,
                    max_reconnect_attempts=-1 if retry else 1,
                    reconnect_time_wait=1,
                    error_cb=_log_error,
                    disconnected_cb=bus._on_disconnect,
                    reconnected_cb=bus._on_reconnect,
                )
                bus.js = bus.nc.jetstream()
                return bus
            except (OSError, nats.errors.Error, TimeoutError) as error:
                if _refused_credentials(error):
                    raise BusError(
                        f"NATS at {url} refused the credentials ({error}); set BERTH_CREDS"
                        " to a seed file made by `berth up` or `berth creds init`"
                    ) from error
                if not retry or loop.time() >= deadline:
                    raise BusError(f"cannot reach NATS at {url}: {error}") from error
                await asyncio.sleep(0.1)

    async def _on_disconnect(self) -> None:
        if not self.closing:
            log.warning("nats_disconnected")

    async def _on_reconnect(self) -> None:
        self._reconnected_at = asyncio.get_running_loop().time()
        log.info("nats_reconnected")
        # A task: nats-py awaits this callback inside its reconnect loop.
        self._resuming = asyncio.get_running_loop().create_task(self._resume())

    async def _resume(self) -> None:
        """Ask again now for what a restarted server forgot: the pumps' outstanding pull
        requests, and ordered consumers (key-value watches), which live in its memory. Left to
        the pumps' watchdog and nats-py's heartbeat check, a Job submitted just after a NATS
        restart waited 19 s to be seen."""
        for pump in list(self._pumps.values()):
            pump.requested = 0
            await pump._top_up()
        for subscription in list(self.nc._subs.values()):
            ordered = getattr(subscription, "_jsi", None)
            if ordered is not None and ordered._ordered:
                try:
                    await ordered.reset_ordered_consumer(ordered._sseq + 1)
                except nats.errors.Error as error:
                    log.warning("watch_not_resumed", error=repr(error))

    def _in_outage(self) -> bool:
        """NATS is away, or came back less than :data:`OUTAGE_SETTLE_S` ago (a service only)."""
        if not self.rides_out_outages or self.nc.is_closed:
            return False
        if not self.nc.is_connected or self.nc.is_reconnecting:
            return True
        return asyncio.get_running_loop().time() - self._reconnected_at < OUTAGE_SETTLE_S

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

        async def ensure() -> None:
            try:
                await self.js.add_stream(config)
            except nats.js.errors.BadRequestError:
                # err 10058: the stream exists with another config; bring it up to date.
                await self.js.update_stream(config)

        await _through_jetstream_outage(ensure, what=f"stream {STREAM}")

    async def kv(self, bucket: str, *, history: int = 1, ttl: float | None = None) -> KeyValue:
        """Open a key-value bucket, creating it on first use (``ttl``: a key not written for
        that many seconds goes away)."""

        async def open_bucket() -> KeyValue:
            try:
                return await self.js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                try:
                    return await self.js.create_key_value(
                        bucket=bucket,
                        history=history,
                        ttl=ttl,
                        storage=api.StorageType.FILE,
                        replicas=int(os.environ.get("BERTH_STREAM_REPLICAS", "1")),
                    )
                except nats.js.errors.BadRequestError:
                    return await self.js.key_value(bucket)  # another service won the race

        return await _through_jetstream_outage(open_bucket, what=f"bucket {bucket}")

    # --- publishing ------------------------------------------------------------------------

    async def publish(self, event: Event) -> Ack:
        """Publish one event and wait for the stream to store it (retrying on timeout)."""
        return await self._publish_raw(*self._prepared(event))

    def _prepared(self, event: Event) -> tuple[str, bytes, str]:
        """Subject, payload and message id of an event, stamped with this bus's lease term:
        ``term``, and ``-t<term>`` on the id, so that a new leader's decision is never dropped
        as a copy of a deposed leader's void one (docs/events.md)."""
        if self.term:
            event = msgspec.structs.replace(event, term=self.term, id=f"{event.id}-t{self.term}")
        return subject_for(event), encode_event(event), event.id

    async def _publish_raw(self, subject: str, payload: bytes, msg_id: str) -> Ack:
        headers = {"Nats-Msg-Id": msg_id}
        delay = 0.1
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._acked(subject, payload, headers)
            except (AckTimeout, nats.errors.Error, _NoStream) as error:
                # Unknown outcome: retry with the same id, the duplicate window dedupes.
                # No responders for the stream is an outage too, even on a connection that
                # stayed up: in a NATS cluster, the stream's leader died and its Raft group
                # elects another (5-7 s measured). Giving up after PUBLISH_ATTEMPTS (~1.5 s)
                # failed the watcher's finish round, so the service stopped with Finished
                # reports unsent while their terminal statuses were stored: no watcher ever
                # reported them, and their quota stayed held (bench/failover.py).
                outage = self._in_outage() or (
                    isinstance(error, _NoStream) and self.rides_out_outages
                )
                if not keep_publishing(attempt, outage=outage, stopping=self.stopping):
                    raise BusError(f"publish to {subject} failed: {error!r}") from error
                log.warning(
                    "publish_retry",
                    subject=subject,
                    attempt=attempt,
                    outage=outage,
                    error=repr(error),
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, PUBLISH_BACKOFF_CAP_S)

    async def _acked(self, subject: str, payload: bytes, headers: dict[str, str]) -> Ack:
        try:
            return await (await self.acks.send(subject, payload, headers))
        except PublishRefused as refused:
            if refused.code == NO_RESPONDERS:
                raise _NoStream(str(refused)) from refused  # the stream may be coming up
            raise BusError(f"publish to {subject} refused: {refused.description}") from refused

    async def publish_many(self, events: Sequence[Event]) -> None:
        """Publish a batch pipelined (one round trip for all), then retry any that failed."""
        await (await self.send_many(events)).settle()

    async def send_many(self, events: Sequence[Event]) -> SentEvents:
        """Send the batch of :meth:`publish_many` and return at once: the caller may send
        more (key updates) before it awaits ``settle()``, one round trip for all."""
        prepared = [self._prepared(e) for e in events]
        futures = [
            await self.acks.send(subject, payload, {"Nats-Msg-Id": msg_id})
            for subject, payload, msg_id in prepared
        ]
        return SentEvents(self, prepared, futures)

    async def update_key(self, kv: KeyValue, key: str, value: bytes, *, last: int) -> int:
        """``kv.update`` (compare-and-swap on the key's last revision), pipelined like a
        publish; returns the new revision. A lost swap raises
        ``nats.js.errors.KeyWrongLastSequenceError``, as ``kv.update`` does; an unanswered
        one raises ``AckTimeout`` (whether it was stored is unknown: read the key again)."""
        [outcome] = await (await self.send_key_updates(kv, [(key, value, last)])).outcomes()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def send_key_updates(
        self, kv: KeyValue, updates: Sequence[tuple[str, bytes, int | None]]
    ) -> KeyUpdates:
        """Many :meth:`update_key` (key, value, last revision) sent at once; this returns
        before the acks, so the caller may send more (a publish) before it awaits
        ``outcomes()``, one round trip for all. A last revision of None is a plain put."""
        futures = [
            await self.acks.send(
                f"{kv._pre}{key}",
                value,
                {} if last is None else {"Nats-Expected-Last-Subject-Sequence": str(last)},
            )
            for key, value, last in updates
        ]
        return KeyUpdates([key for key, _, _ in updates], futures)

    # --- consuming -------------------------------------------------------------------------

    async def durable_subscription(
        self,
        durable: str,
        subjects: Sequence[str],
        *,
        max_ack_pending: int = 20_000,
        most_of_stream: bool = False,
        keep_subject: Callable[[str], bool] | None = None,
    ) -> JetStreamContext.PullSubscription:
        """A durable pull consumer on some subjects: a restarted service resumes where it was.

        ``most_of_stream``: the subjects are most of what the stream carries, so the
        consumer reads everything and keeps its subjects here (see :meth:`_filtered`);
        ``keep_subject`` narrows them further, before anything is decoded.
        """
        config = api.ConsumerConfig(
            durable_name=durable,
            # One ack per batch: acking each message cost the busiest consumer a tenth of its
            # CPU and nats-server as many ack messages as events.
            ack_policy=api.AckPolicy.ALL,
            deliver_policy=api.DeliverPolicy.ALL,
            # Markers travel with the events they fence (shared/fencing.py).
            filter_subjects=[] if most_of_stream else [*subjects, LEASE_SUBJECTS],
            max_ack_pending=max_ack_pending,
            ack_wait=30.0,
        )
        try:
            await self.js.add_consumer(STREAM, config)
        except nats.js.errors.APIError:  # 10012, "ack policy can not be updated", or other
            if not await self._recreated_with_new_ack_policy(config):
                raise  # some other change to the consumer was refused
        subscription = await self.js.pull_subscribe_bind(durable, stream=STREAM)
        # It resumes after its ack floor: its fence starts from the markers stored up to there.
        floor = (await self.js.consumer_info(STREAM, durable)).ack_floor
        resume = (floor.stream_seq if floor and floor.stream_seq else 0) + 1
        self._fences[id(subscription)] = await fence_before(self.js, stream=STREAM, sequence=resume)
        if not most_of_stream:
            self._pull_subscriptions.append(subscription)
            return subscription
        return self._filtered(subscription, subjects, keep_subject)

    async def _recreated_with_new_ack_policy(self, config: api.ConsumerConfig) -> bool:
        """A durable consumer made by an older Berth acks each message, and NATS cannot
        change a consumer's ack policy: recreate it to resume after its ack floor (what was
        acked beyond the floor comes again; handlers are idempotent)."""
        assert config.durable_name is not None
        old = await self.js.consumer_info(STREAM, config.durable_name)
        if old.config.ack_policy == config.ack_policy:
            return False
        resume = (old.ack_floor.stream_seq if old.ack_floor else 0) + 1
        await self.js.delete_consumer(STREAM, config.durable_name)
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = resume
        await self.js.add_consumer(STREAM, config)
        log.info("consumer_recreated", consumer=config.durable_name, resume_at=resume)
        return True

    async def replay_subscription(
        self, subjects: Sequence[str]
    ) -> JetStreamContext.PullSubscription:
        """An ephemeral consumer reading the whole stream from its first message.

        For a service whose state is the fold of every event (admission): no acks to keep;
        it wants most of the stream, so its subjects are kept here (see :meth:`_filtered`).
        """
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            inactive_threshold=60.0,
        )
        subscription = await self.js.pull_subscribe("", stream=STREAM, config=config)
        return self._filtered(subscription, subjects)

    def _filtered(
        self,
        subscription: JetStreamContext.PullSubscription,
        subjects: Sequence[str],
        keep_subject: Callable[[str], bool] | None = None,
    ) -> JetStreamContext.PullSubscription:
        """A consumer that wants most of the stream reads all of it and keeps ``subjects``
        here, before decoding.

        Why not the server's ``filter_subjects``: with several filters, a consumer that lags
        makes nats-server find each next message by walking the block's whole index of
        subjects once subjects repeat in it (``firstMatchingMulti``; every workload has
        subjects of its own). The Kueue benchmark measured nats-server at 48 CPU-seconds
        instead of 8 for the same run. Unfiltered, the next message is the next sequence.
        A consumer that wants a small part (the watcher's decisions) keeps the server's
        filter: receiving and acking the rest would cost it more.
        """
        self._pull_subscriptions.append(subscription)
        matcher = subject_matcher([*subjects, LEASE_SUBJECTS])
        self._wanted[id(subscription)] = (
            matcher
            if keep_subject is None
            else lambda s: (keep_subject(s) and matcher(s)) or s.startswith(MARKER_PREFIX)
        )
        return subscription

    def _decode(
        self, subscription: JetStreamContext.PullSubscription, messages: Sequence[Msg]
    ) -> list[AnyEvent]:
        """The events of a batch, kept to the subjects this consumer filters here, that pass
        its fence."""
        events = decode_batch(messages, self._wanted.get(id(subscription)), self.on_malformed)
        return screen(self.fence(subscription), events)

    def fence(self, subscription: JetStreamContext.PullSubscription) -> Fence:
        """The fence this consumer's events pass (shared/fencing.py): void events and markers
        never reach a handler; its ``term(role)`` shows how far the consumer has read."""
        return self._fences.setdefault(id(subscription), Fence())

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
        settling_batches: int = 8,
    ) -> None:
        """Fetch batches until ``stopping`` is set, handing each batch to ``handler``; for
        durable consumers (acks all up to a message).

        A handler may return what it still has in flight (an awaitable: writes sent, acks
        not in yet). The next batch is handed over at once, and a batch is acked, in order,
        once its own settling is done; up to ``settling_batches`` batches may be settling.
        Why: the watcher's bookkeeping round trip per batch held every admission that came
        meanwhile, 20-30 ms of quota idle per workload on the Kueue benchmark.

        What was handed over is always finished (handled, settled and acked) before the
        loop returns, so a SIGTERM drains in-flight work instead of dropping it.
        """
        queue: asyncio.Queue[tuple[Msg, list[AnyEvent], Settling | None] | None] = asyncio.Queue(
            maxsize=settling_batches
        )
        acker = asyncio.create_task(self._ack_in_order(queue, handler, stopping))
        try:
            async for messages in self.batches(subscription, stopping=stopping, batch=batch):
                events = self._decode(subscription, messages)
                if self.acting is not None and not await _acting_again(self.acting, stopping):
                    break  # stopped while its lease was suspended: this batch stays unacked
                handled, settling = await self._handle(events, handler, stopping=stopping)
                if not handled:
                    break  # stopped while retrying: this batch stays unacked
                if not await _hand_over(queue, (messages[-1], events, settling), acker):
                    if settling is not None:  # finished, though it will not be acked
                        await asyncio.gather(settling, return_exceptions=True)
                    break  # acking failed (the connection): nothing more is acked
            await _hand_over(queue, None, acker)
            await acker
        finally:
            if not acker.done():
                await _cancelled(acker)
            # Whatever arrived but was not handled goes back now (not after ack_wait), and no
            # pull request of ours outlives the loop to take messages nobody will read.
            for msg in await self._close_pump(subscription):
                try:
                    await msg.nak()
                except nats.errors.Error:
                    break

    async def _ack_in_order(
        self,
        queue: asyncio.Queue[tuple[Msg, list[AnyEvent], Settling | None] | None],
        handler: Handler,
        stopping: asyncio.Event,
    ) -> None:
        """Ack each handed-over batch once it has settled, in order (an ack covers every
        earlier message). A batch whose settling failed is handled again, settled within
        the retries, before its ack."""
        while (item := await queue.get()) is not None:
            last, events, settling = item
            if settling is not None:
                try:
                    await settling
                except Exception:
                    log.exception("settling_failed", count=len(events))
                    handled, _ = await self._handle(events, handler, stopping=stopping, settle=True)
                    if not handled:
                        return  # stopped: unacked, so it is delivered again after a restart
            await last.ack()  # and, by the ack policy, all before it

    async def _handle(
        self,
        events: list[AnyEvent],
        handler: Handler,
        *,
        stopping: asyncio.Event,
        settle: bool = False,
    ) -> tuple[bool, Settling | None]:
        """Hand one batch to the handler until it succeeds: (False, None) if the service
        stopped first, else (True, what the handler left settling). With ``settle``, that
        settling is awaited within each attempt.

        Why here and not by nak and redelivery: an ack covers every earlier message, so the
        next batch's ack would cover a failed one. A batch that fails ``HANDLER_ATTEMPTS``
        times is handled one event at a time, and an event that still fails is logged and
        dropped (what max_deliver used to do), so one poison event cannot stop the service.
        """

        delay = 0.1
        for number in range(1, HANDLER_ATTEMPTS + 1):
            try:
                if settle:
                    await _settled(handler(events))
                    return True, None
                return True, await handler(events)
            except Exception:
                log.exception("handler_failed", count=len(events), attempt=number)
            if await _stopped_within(stopping, delay):
                return False, None
            delay = min(delay * 2, 5.0)
        for event in events:
            for _ in range(3):
                try:
                    await _settled(handler([event]))  # one at a time, each settled
                    break
                except Exception:
                    if await _stopped_within(stopping, delay):
                        return False, None
            else:
                log.error(
                    "event_dropped",
                    event_id=event.id,
                    workload=event.workload.key,
                    reason=f"its handler failed {HANDLER_ATTEMPTS + 3} times",
                )
        return True, None

    async def replay_to_end(
        self,
        subscription: JetStreamContext.PullSubscription,
        fold: Callable[[list[AnyEvent]], None],
    ) -> int:
        """Fold every stored event through ``fold``; returns how many messages there were.

        For services whose state is the fold of the whole stream: they call this at start and
        decide nothing until it returns. What arrives after the end stays buffered for
        :meth:`next_batch`.
        """
        if (await subscription.consumer_info()).num_pending == 0:
            await self._pump(subscription)  # live from here on
            return 0
        pump = await self._pump(subscription)
        count = 0
        while True:
            # Not interruptible: a replay cut short would leave the service deciding on half
            # its state; a stop during it waits for the end (or the grace period).
            messages = await pump.take(2000, wait=PULL_EXPIRES_S, interruptible=False)
            if not messages:
                if (await subscription.consumer_info()).num_pending == 0:
                    return count
                continue
            fold(self._decode(subscription, messages))
            count += len(messages)
            if messages[-1].metadata.num_pending == 0:
                return count

    async def next_batch(
        self, subscription: JetStreamContext.PullSubscription, *, wait: float
    ) -> list[AnyEvent] | None:
        """The events that arrived (all of them, returned as soon as there is one), [] when
        none came within ``wait`` s, None once the connection is closed."""
        if self.nc.is_closed or self.nc.is_draining:
            return None
        pump = await self._pump(subscription)
        messages = await pump.take(None, wait=wait)
        return self._decode(subscription, messages)

    async def batches(
        self,
        subscription: JetStreamContext.PullSubscription,
        *,
        stopping: asyncio.Event,
        batch: int = 512,
        idle_timeout: float = 0.5,
    ) -> AsyncIterator[list[Msg]]:
        pump = await self._pump(subscription)
        while not stopping.is_set():
            if self.nc.is_closed or self.nc.is_draining:
                return
            messages = await pump.take(batch, wait=idle_timeout)
            if messages:
                yield messages

    async def _pump(self, subscription: JetStreamContext.PullSubscription) -> _PullPump:
        pump = self._pumps.get(id(subscription))
        if pump is None:
            info = await subscription.consumer_info()
            next_subject = f"{JS_API_PREFIX}.CONSUMER.MSG.NEXT.{info.stream_name}.{info.name}"
            pump = await _PullPump.open(self.nc, next_subject)
            self._pumps[id(subscription)] = pump
        return pump

    async def _close_pump(self, subscription: JetStreamContext.PullSubscription) -> list[Msg]:
        pump = self._pumps.pop(id(subscription), None)
        return [] if pump is None else await pump.close()

    async def serve_requests(
        self, subject: str, answer: RequestHandler, *, queue: str = ""
    ) -> Subscription:
        """Answer core request/reply on ``subject`` (wildcards allowed) with JSON.

        ``answer(verb, data)`` gets the subject's last token and the request body. Every
        request gets a reply, an error included, never a silent timeout for the asker.
        """

        async def on_request(msg: Msg) -> None:
            verb = msg.subject.rsplit(".", 1)[-1]
            try:
                reply = await answer(verb, msg.data or b"{}")
            except msgspec.DecodeError as error:
                reply = {"error": f"bad request: {error}"}
            except Exception as error:
                log.exception("request_failed", subject=msg.subject)
                reply = {"error": f"internal error: {error!r}"}
            if msg.reply:
                await msg.respond(msgspec.json.encode(reply))

        # ``queue``: replicas of a service answer as a queue group, one reply per request.
        return await self.nc.subscribe(subject, queue=queue, cb=on_request)

    def interrupt_waits(self) -> None:
        """The service is stopping: loops waiting for their next batch return at once
        instead of at the end of their idle timeout (a stop took half a second for it)."""
        self.stopping = True
        for pump in self._pumps.values():
            pump.interrupt()

    async def close(self) -> None:
        """Unsubscribe pull subscriptions, then drain the connection."""
        self.closing = True
        await self.acks.close()
        for pump in list(self._pumps.values()):
            await pump.close()
        self._pumps.clear()
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


class _PullPump:
    """A pull consumer kept fed: pull requests stay outstanding, so the server pushes each
    message the moment it is stored, and :meth:`take` hands over whatever has arrived.

    Why not nats-py's ``fetch(n, timeout)``: once its first message has come it keeps waiting
    for ``n`` messages or the whole timeout, so with the services' 0.2-0.5 s timeouts a lone
    event waited up to that long (the Kueue benchmark measured admitted -> started at 306 ms
    mean); and it reads each message through its own task + wait_for. Here messages land in a
    list from a subscription callback, and one wake-up takes them all.

    Accounting, as nats.go's ``Consume`` does it: ``requested`` is what outstanding requests
    may still deliver; a delivered message takes one off, a 408/409 status takes off what its
    request had left (``Nats-Pending-Messages``). Below half a batch, a new request tops it up.
    """

    BATCH = 512

    def __init__(self, nc: Client, next_subject: str) -> None:
        self.nc = nc
        self.next_subject = next_subject
        self.inbox = nc.new_inbox()
        self.buffer: list[Msg] = []
        self.arrived = asyncio.Event()
        self.requested = 0
        self.last_request = 0.0
        self.last_heard = 0.0
        self.closed = False
        self.interrupted = False
        self.subscription: Any = None

    @classmethod
    async def open(cls, nc: Client, next_subject: str) -> _PullPump:
        pump = cls(nc, next_subject)
        pump.subscription = await nc.subscribe(pump.inbox, cb=pump._on_message)
        await pump._top_up()
        return pump

    async def _top_up(self) -> None:
        if self.closed or self.requested > self.BATCH // 2:
            return
        want = self.BATCH - self.requested
        self.requested += want
        self.last_request = time.monotonic()
        request = {"batch": want, "expires": int(PULL_EXPIRES_S * 1e9)}
        try:
            await self.nc.publish(self.next_subject, json.dumps(request).encode(), reply=self.inbox)
        except nats.errors.Error:
            self.requested -= want  # closed or reconnecting: the watchdog asks again

    async def _on_message(self, msg: Msg) -> None:
        self.last_heard = time.monotonic()
        status = JetStreamContext.is_status_msg(msg)
        if status is None:
            self.requested -= 1
            self.buffer.append(msg)
            self.arrived.set()
        elif status != "100":  # not a heartbeat: the request ended (expired, or refused)
            left = (msg.headers or {}).get("Nats-Pending-Messages")
            self.requested = self.requested - int(left) if left is not None else 0
        self.requested = max(self.requested, 0)
        await self._top_up()

    def interrupt(self) -> None:
        """The service is stopping: :meth:`take` stops waiting, now and from now on."""
        self.interrupted = True
        self.arrived.set()

    async def take(
        self, limit: int | None, *, wait: float, interruptible: bool = True
    ) -> list[Msg]:
        """What has arrived (at most ``limit``), waiting up to ``wait`` s for the first
        (not at all once interrupted, if ``interruptible``)."""
        if not self.buffer and not (interruptible and self.interrupted):
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), wait)
            except TimeoutError:
                await self._watchdog()
                return []
        if limit is None or len(self.buffer) <= limit:
            batch, self.buffer = self.buffer, []
        else:
            batch, self.buffer = self.buffer[:limit], self.buffer[limit:]
        if not self.buffer:
            self.arrived.clear()
        return batch

    async def _watchdog(self) -> None:
        """Quiet for longer than a request lives: whatever we count as outstanding is not
        (a lost status, a reconnect); ask again rather than wait forever."""
        now = time.monotonic()
        if now - max(self.last_request, self.last_heard) > 2 * PULL_EXPIRES_S:
            self.requested = 0
            await self._top_up()

    async def close(self) -> list[Msg]:
        """Stop asking; returns the messages that arrived and were never taken."""
        self.closed = True
        if self.subscription is not None:
            try:
                await self.subscription.unsubscribe()
            except (nats.errors.Error, ValueError):
                pass
        leftover, self.buffer = self.buffer, []
        return leftover


class BucketWatch:
    """A key-value bucket followed as a list+watch: the current entries, then each change."""

    def __init__(self, watcher: KeyValue.KeyWatcher) -> None:
        self._watcher = watcher

    @classmethod
    async def snapshot(cls, kv: KeyValue) -> list[KeyValue.Entry]:
        """Every entry that exists now (a watch, stopped once the initial values are in:
        unlike ``kv.keys()``, it cannot end early while keys change)."""
        watch, entries = await cls.start(kv)
        await watch._watcher.stop()  # type: ignore[no-untyped-call]
        return entries

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
        async with self._following(stopping):
            while not stopping.is_set():
                try:
                    entry = await self._watcher.updates(timeout=WATCH_IDLE_TIMEOUT_S)  # type: ignore[no-untyped-call]
                except TimeoutError:
                    continue
                if entry is not None:
                    await handle(entry)

    async def follow_batches(
        self,
        handle: Callable[[list[KeyValue.Entry]], Awaitable[None]],
        *,
        stopping: asyncio.Event,
    ) -> None:
        """Like :meth:`follow`, handing over every change that has arrived as one list (in
        order, at most 256), so a busy bucket costs one wake-up per batch, not per entry."""
        async with self._following(stopping):
            await _follow_batches(self._watcher, handle, stopping)

    @contextlib.asynccontextmanager
    async def _following(self, stopping: asyncio.Event) -> AsyncIterator[None]:
        """Around a follow loop: wake it once ``stopping`` is set (it ends now rather than at
        the end of its idle timeout); afterwards, stop the watch."""
        waking = asyncio.create_task(_wake_on_stop(self._watcher, stopping))
        try:
            yield
        finally:
            await _cancelled(waking)
            await self._watcher.stop()  # type: ignore[no-untyped-call]


async def _wake_on_stop(watcher: KeyValue.KeyWatcher, stopping: asyncio.Event) -> None:
    """Once ``stopping`` is set, put None (nats-py's own "no entry" marker, which the follow
    loops skip) in the watch's queue: a loop waiting for its next entry wakes up."""
    await stopping.wait()
    with contextlib.suppress(asyncio.QueueFull):  # full: the loop has entries, it is awake
        watcher._updates.put_nowait(None)


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


WATCH_BATCH = 256  # nats-py's watch queue holds at most this many entries
WATCH_IDLE_TIMEOUT_S = 0.5  # a follow loop looks at its stop flag at least this often


async def _follow_batches(
    watcher: KeyValue.KeyWatcher,
    handle: Callable[[list[KeyValue.Entry]], Awaitable[None]],
    stopping: asyncio.Event,
) -> None:
    # nats-py queues a watch's entries in ``_updates``; taking every entry already there in
    # one go (instead of one wait_for per entry) lets the handler pipeline its work.
    queue: asyncio.Queue[Any] = watcher._updates
    while not stopping.is_set():
        try:
            first = await watcher.updates(timeout=WATCH_IDLE_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except TimeoutError:
            continue
        batch = [first] if isinstance(first, KeyValue.Entry) else []
        while len(batch) < WATCH_BATCH:
            try:
                entry = queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            if isinstance(entry, KeyValue.Entry):
                batch.append(entry)
            elif entry is not None:  # the stop sentinel: put it back for whoever stops
                queue.put_nowait(entry)
                break
        if batch:
            await handle(batch)


def live_value(entry: KeyValue.Entry) -> bytes | None:
    """An entry's value, or None when the entry records a deletion."""
    if entry.operation in ("DEL", "PURGE") or not entry.value:
        return None
    return entry.value


async def _hand_over(queue: asyncio.Queue[Any], item: Any, acker: asyncio.Task[None]) -> bool:
    """Put ``item`` on the acker's queue, waiting for room; False if the acker ended."""
    if acker.done():
        return False
    try:
        queue.put_nowait(item)
        return True
    except asyncio.QueueFull:
        pass
    put = asyncio.create_task(queue.put(item))
    await asyncio.wait({put, acker}, return_when=asyncio.FIRST_COMPLETED)
    if put.done():
        return True
    await _cancelled(put)
    return False


async def _settled(handled: Awaitable[Settling | None]) -> None:
    settling = await handled
    if settling is not None:
        await settling


async def _acting_again(acting: asyncio.Event, stopping: asyncio.Event) -> bool:
    """Whether this replica may act on the batch in hand: at once while its lease is renewed,
    else once a renewal ends the suspension; False if it stops first."""
    if acting.is_set():
        return True
    waits = [asyncio.create_task(acting.wait()), asyncio.create_task(stopping.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        await _cancelled(wait)
    return acting.is_set() and not stopping.is_set()


async def _stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
        return True
    except TimeoutError:
        return False


def decode_batch(
    messages: Sequence[Msg],
    wanted: Callable[[str], bool] | None = None,
    malformed: Callable[[Msg, str], None] | None = None,
) -> list[AnyEvent]:
    """Decode a fetched batch into events; messages whose subject ``wanted`` refuses are
    skipped undecoded, a malformed one is skipped (acking past it drops it) and handed to
    ``malformed`` (a dead letter), else logged."""
    events: list[AnyEvent] = []
    for msg in messages:
        if wanted is not None and not wanted(msg.subject):
            continue
        try:
            events.append(decode_event(msg.data))
        except msgspec.DecodeError as error:
            if malformed is not None:
                malformed(msg, str(error))
            else:
                log.error("malformed_event", subject=msg.subject, error=str(error))
    return events


async def _log_error(error: Exception) -> None:
    log.warning("nats_error", error=repr(error))
