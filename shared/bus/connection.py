"""One NATS connection with its JetStream context: connecting, riding out outages, the event
stream and the buckets (:class:`Connection`, the base of ``Bus``)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, ClassVar, Self, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from shared.auth import ClientAuth
from shared.bus.acks import AckTracker
from shared.bus.buckets import Bucket, Listeners, open_bucket
from shared.bus.current import CurrentClient
from shared.bus.errors import BusError, NoResponders, translated
from shared.bus.pulling import PullPump
from shared.bus.settings import STREAM, STREAM_SUBJECTS, BusSettings
from shared.bus.view import StoredCopies, copies_in, stream_metadata
from shared.bus.violations import RememberingClient, Violations, refusal, refused_credentials
from shared.fencing import Fence
from shared.logging import get_logger
from shared.subjects import publisher_batch_subjects

__all__ = ["DUPLICATE_WINDOW_S", "OUTAGE_SETTLE_S", "Connection", "ErrorCallback", "Served"]

log = get_logger("bus")

DUPLICATE_WINDOW_S = 120.0
PUBLISH_ACK_TIMEOUT_S = 2.0
# After a reconnect JetStream may take a while (streams recovering, a leader being elected)
# before publishes are answered: for this long that still counts as the outage.
OUTAGE_SETTLE_S = 30.0
JETSTREAM_OUTAGE_S = 30.0  # how long setup calls wait out an unanswering JetStream
# nats-py waits this long before trying a server again that it tried last (2 s by default):
# short, so a restarted single node or a cluster's next node is reached at once; a random
# part per client, so a cluster's clients do not all come back in the same instant.
RECONNECT_WAIT_S = 0.25
RECONNECT_JITTER_S = 0.25
# A server that stops answering without closing the connection (hung, or its host gone
# without a reset) is noticed after PINGS_UNANSWERED pings go unanswered, PING_INTERVAL_S
# apart, and the client moves to another node. nats-py's default (pings minutes apart) left
# a service on a hung node past a consumer's inactive threshold: the server removed it
# unread (shared/bus/pulling.py ConsumerGone). Not tighter: the server's answer comes
# after whatever it had queued for the client, which a client busy with a backlog (a replay
# at start) reads late, and a false alarm costs a reconnect.
PING_INTERVAL_S = 5
PINGS_UNANSWERED = 3
CLOSE_FAILED_S = 1.0  # a client that failed its first connection gets this long to close
# A connection signing in anew with a rotated seed gives NATS this long to accept it.
SIGN_IN_TIMEOUT_S = 5.0

T = TypeVar("T")
ErrorCallback = Callable[[Exception], Awaitable[None]]
RequestHandler = Callable[[str, bytes], Awaitable[dict[str, Any]]]
MsgCallback = Callable[[Msg], Awaitable[None]]


class Served:
    """A request subject this connection answers (:meth:`Connection.serve_requests`); it is
    served again on the new client when the connection signs in anew."""

    def __init__(self, subject: str, queue: str, callback: MsgCallback) -> None:
        self.subject = subject
        self.queue = queue
        self.callback = callback
        self.subscription: Subscription | None = None
        self.ended = False

    async def subscribe(self, nc: Client) -> None:
        with translated():
            self.subscription = await nc.subscribe(self.subject, queue=self.queue, cb=self.callback)

    async def unsubscribe(self) -> None:
        """Stop answering; harmless once the connection is closed or draining."""
        self.ended = True
        if self.subscription is not None:
            with contextlib.suppress(nats.errors.Error, ValueError):
                await self.subscription.unsubscribe()


class Connection:
    """One NATS connection with its JetStream context, shared by a service's tasks."""

    # nats-py's client, or a subclass: the CLI's remembers the subjects it sent, to name a
    # refused one as sent (berth_cli/client.py); a service's publishes stay nats-py's own.
    client_type: ClassVar[type[Client]] = Client

    def __init__(self, *, source: str, settings: BusSettings | None = None) -> None:
        # Everything made from the connection holds this handle, never a nats-py client
        # itself: signing in anew replaces the client behind it (:meth:`_sign_in_anew`).
        self._current = CurrentClient(self.client_type())
        self.nc: Client = self._current.as_client()
        self.js = JetStreamContext(self.nc)
        self.source = source
        # batched family -> the subject of this service's batches of it
        self.batch_subjects = publisher_batch_subjects(source)
        self.settings = settings or BusSettings()
        self.closing = False  # an intended close is not worth a "disconnected" warning
        self.stopping = False  # the service is stopping: a publish no longer waits out outages
        self.rides_out_outages = False  # connected with retry: publishes wait for NATS
        self._reconnected_at = float("-inf")  # loop time of the last reconnect
        self._resuming: asyncio.Task[None] | None = None
        # Told of each asynchronous error nats-py reports (a permissions violation, say);
        # by default a log line. Tests that expect a refusal set their own.
        self.on_error: ErrorCallback = _log_error
        # The tasks a permissions violation interrupts (a CLI command's: berth_cli/client.py).
        self.violations = Violations()
        # Told of each event that does not decode (shared.deadletter sets it; else a log line).
        self.on_malformed: Callable[[Msg, str], None] | None = None
        self.reconnects: Listeners = set()  # watches of this connection's buckets
        self._pull_subscriptions: list[JetStreamContext.PullSubscription] = []
        self._pumps: dict[int, PullPump] = {}  # id(pull subscription) -> its pump
        self.acks = AckTracker(self.nc, timeout=PUBLISH_ACK_TIMEOUT_S)
        self._consumer_names: dict[int, str] = {}  # id(durable pull subscription) -> its name
        self._fences: dict[int, Fence] = {}  # id(pull subscription) -> its fence
        self.term = 0  # the lease term stamped on what this bus publishes (shared/lease.py)
        # Set while this replica may act (shared/leadership.py): consumers wait while clear.
        self.acting: asyncio.Event | None = None
        # How to connect again, and as whom: kept to sign in anew after a rotation.
        self._auth = ClientAuth()
        self._servers: list[str] = []
        self._reconnect_wait: Any = RECONNECT_WAIT_S
        self._signed_in_as: str | None = None  # the public key of the seed connected with
        self._signing_in: asyncio.Task[None] | None = None
        self._served: list[Served] = []

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        source: str,
        connect_timeout: float = 5.0,
        retry: bool = True,
        auth: ClientAuth,
        settings: BusSettings | None = None,
    ) -> Self:
        """Connect, retrying the first connection for ``connect_timeout`` seconds.

        ``auth``: the credentials and TLS material, always given: nothing below an entry point
        reads the environment, so only a service's main, the CLI's connection helper, the
        console's entry, a bench script or a test fixture calls :meth:`ClientAuth.from_env`
        (``ClientAuth()``: none, for a server that asks for none). ``settings``: what the
        deployment decided (:meth:`BusSettings.from_env`); by default a single-node one."""
        bus = cls(source=source, settings=settings)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connect_timeout
        bus._auth = auth
        try:
            options = bus._auth.connect_options(url)
            signed_in_as = bus._auth.public_key()
        except (OSError, ValueError) as error:
            raise BusError(f"cannot use the bus credentials: {error}") from error
        # "nats://a:4222,nats://b:4222": the servers of a cluster; nats-py picks one and fails
        # over to the others.
        bus._servers = [server.strip() for server in url.split(",") if server.strip()]
        bus.rides_out_outages = retry
        # nats-py annotates an int but sleeps on whatever number it is given.
        bus._reconnect_wait = RECONNECT_WAIT_S + random.uniform(0, RECONNECT_JITTER_S)
        untried = len(bus._servers) - 1  # told not to retry: each server once, in order
        while True:
            try:
                await bus._open_first(options)
                bus._signed_in_as = signed_in_as
                return bus
            except (OSError, nats.errors.Error, TimeoutError) as error:
                if refused_credentials(error):
                    raise BusError(refusal(url, source, auth, error)) from error
                if not retry and untried > 0:
                    untried -= 1
                    await bus._next_server()
                    continue
                if not retry or loop.time() >= deadline:
                    reason = str(error) or type(error).__name__  # a timeout says nothing
                    raise BusError(f"cannot reach NATS at {url}: {reason}") from error
                await asyncio.sleep(0.1)

    async def _next_server(self) -> None:
        """Try the next server of the list first, with a client of its own: a server that
        accepted the connection and never answered (hung) ends a first connection told not to
        retry, and nats-py would not go on to the others. The failed client is closed (its
        socket), never waited on for long."""
        self._servers = [*self._servers[1:], *self._servers[:1]]
        failed, self._current.client = self._current.client, self.client_type()
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await asyncio.wait_for(failed.close(), CLOSE_FAILED_S)

    async def _open_first(self, options: dict[str, Any]) -> None:
        """Open the first connection, raising nats-py's error if NATS refuses the credentials:
        told to retry (a service), nats-py would offer the same key again forever, so a
        service started without its seed would wait, logging, instead of saying so."""
        client = self._current.client
        refused = asyncio.Event()
        loop = asyncio.get_running_loop()
        opening = loop.create_task(self._open(client, options, refused))
        waiting = loop.create_task(refused.wait())
        try:
            await asyncio.wait({opening, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (opening, waiting):
                if not task.done():
                    task.cancel()
            await asyncio.gather(opening, waiting, return_exceptions=True)
        if opening.cancelled():  # refused while nats-py was still trying
            error = client.last_error or nats.errors.Error("authorization violation")
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await client.close()
            raise error
        opening.result()  # what connecting raised, if anything

    async def _open(
        self, client: Client, options: dict[str, Any], refused: asyncio.Event | None = None
    ) -> None:
        """Connect ``client`` with ``options`` (credentials, TLS); its callbacks act only
        while it is the current client. ``refused``: set if NATS refuses the credentials of
        a client that is not current yet (one signing in anew) or not connected yet."""

        def current() -> bool:
            return client is self._current.client

        async def on_error(error: Exception) -> None:
            if refused is not None and refused_credentials(error):
                refused.set()
            if current():
                await self._on_error(error)

        async def on_disconnect() -> None:
            if current():
                await self._on_disconnect()

        async def on_reconnect() -> None:
            if current():
                await self._on_reconnect()

        retry = self.rides_out_outages
        await client.connect(
            self._servers,
            **options,
            name=f"berth-{self.source}",
            connect_timeout=1,
            # A service waits for NATS and rides out outages; a CLI command fails fast
            # (nats-py counts -1 as "forever", the initial connection included).
            allow_reconnect=retry,
            max_reconnect_attempts=-1 if retry else 1,
            dont_randomize=not retry,  # told not to retry: the servers in order (_next_server)
            reconnect_time_wait=self._reconnect_wait,
            ping_interval=PING_INTERVAL_S,
            max_outstanding_pings=PINGS_UNANSWERED,
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )

    async def _on_error(self, error: Exception) -> None:
        if refused_credentials(error):
            self._credentials_refused()
        client = self._current.client
        self.violations.report(error, client.sent if isinstance(client, RememberingClient) else ())
        await self.on_error(error)

    def _credentials_refused(self) -> None:
        """NATS refused this connection's credentials as it reconnected: after a rotation
        (`berth creds rotate`, a Secret updated) it reloaded a configuration without our
        key. A service signs in anew with its seed file as it is now (one attempt at a
        time; nats-py refuses again at its next try, which asks again)."""
        if self._signed_in_as is None or not self.rides_out_outages or self.closing:
            return  # not connected yet (connect reports it), or a CLI command (it fails)
        if self._signing_in is None or self._signing_in.done():
            self._signing_in = asyncio.get_running_loop().create_task(self._sign_in_anew())

    async def _sign_in_anew(self) -> None:
        """Connect a new nats-py client with the seed file's current key (nats-py fixes a
        client's key when it connects), make it current, close the old one, and bind again
        what listened on the old: the publishes' replies, the pull consumers' inboxes, the
        request subjects served, the buckets' watches (as after a reconnect)."""
        try:
            key = self._auth.public_key()
            options = self._auth.connect_options(self._servers[0])
        except (OSError, ValueError) as error:
            log.error("credentials_unreadable", user=self._auth.user, error=str(error))
            return
        if key is None or key == self._signed_in_as:
            log.warning(
                "credentials_refused",
                user=self._auth.user,
                reason="the seed file still holds the key NATS refused; waiting for a new one",
            )
            return
        fresh = self.client_type()
        refused = asyncio.Event()
        opening = asyncio.get_running_loop().create_task(self._open(fresh, options, refused))
        waiting = asyncio.get_running_loop().create_task(refused.wait())
        await asyncio.wait(
            {opening, waiting}, timeout=SIGN_IN_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        for task in (opening, waiting):
            if not task.done():
                task.cancel()
        await asyncio.gather(opening, waiting, return_exceptions=True)
        if opening.cancelled() or opening.exception() is not None or self.closing:
            log.warning("credentials_not_renewed", user=self._auth.user, public_key=key)
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await fresh.close()
            return
        old, self._current.client = self._current.client, fresh
        self._signed_in_as = key
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await old.close()
        log.info("credentials_renewed", user=self._auth.user, public_key=key)
        await self._bind_again()

    async def _bind_again(self) -> None:
        """What listened on the old client listens on the current one; then, as after any
        reconnect, watches start again and pull consumers ask again."""
        await self.acks.resubscribe()
        for served in list(self._served):
            if not served.ended:
                await served.subscribe(self.nc)
        for pump in list(self._pumps.values()):
            await pump.resubscribe()
        await self._on_reconnect()

    async def stop_signing_in(self) -> None:
        """Cancel and await a sign-in under way (the connection is closing)."""
        if self._signing_in is not None:
            self._signing_in.cancel()
            await asyncio.gather(self._signing_in, return_exceptions=True)

    async def _on_disconnect(self) -> None:
        if not self.closing:
            log.warning("nats_disconnected")

    async def _on_reconnect(self) -> None:
        self._reconnected_at = asyncio.get_running_loop().time()
        log.info("nats_reconnected")
        # Their acks were due on the connection that is gone: retried now, not after the
        # timeout (a Job created as a NATS node died was stored seconds late).
        self.acks.lost("the connection was lost: its ack may never come")
        for listener in list(self.reconnects):
            listener()  # a watch: re-created by its own task
        # A task: nats-py awaits this callback inside its reconnect loop.
        self._resuming = asyncio.get_running_loop().create_task(self._resume())

    async def _resume(self) -> None:
        """Ask again now for the pumps' outstanding pull requests, which a restarted server
        (or the node a reconnect lands on) never had: left to the pumps' watchdog, a Job
        submitted just after a NATS restart waited for it to be seen."""
        for pump in list(self._pumps.values()):
            await pump.ask_again()

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
            num_replicas=self.settings.stream_replicas,
        )

        async def ensure() -> None:
            try:
                existing = (await self.js.stream_info(STREAM)).config.metadata
            except nats.js.errors.NotFoundError:
                existing = None
            # which per-workload copies this service keeps: how readers read the view
            config.metadata = stream_metadata(
                existing, self.source, self.settings.copies, datetime.now(UTC)
            )
            try:
                await self.js.add_stream(config)
            except nats.js.errors.BadRequestError:
                # err 10058: the stream exists with another config; bring it up to date.
                await self.js.update_stream(config)

        with translated():
            await _through_jetstream_outage(ensure, what=f"stream {STREAM}")

    async def kv(self, bucket: str, *, history: int = 1, ttl: float | None = None) -> KeyValue:
        """Open a key-value bucket, creating it on first use (``ttl``: a key not written for
        that many seconds goes away)."""

        async def open_it() -> KeyValue:
            return await open_bucket(
                self.nc,
                self.js,
                bucket,
                history=history,
                ttl=ttl,
                replicas=self.settings.stream_replicas,
                reconnects=self.reconnects,
            )

        with translated():
            return await _through_jetstream_outage(open_it, what=f"bucket {bucket}")

    async def existing_kv(self, bucket: str) -> KeyValue:
        """Open a key-value bucket that exists, never creating it (a reader such as the
        console); ``BucketNotFound`` when it does not exist (yet)."""
        return await Bucket.existing(self.nc, self.js, bucket, reconnects=self.reconnects)

    async def view_copies(self) -> StoredCopies:
        """The per-workload copies the services keep, and since when, from the event
        stream's metadata (shared/bus/view.py)."""
        with translated():
            info = await self.js.stream_info(STREAM)
        return copies_in(info.config.metadata)

    async def last_sequence(self) -> int:
        """The sequence of the newest message in the event stream (0 when empty)."""
        with translated():
            info = await self.js.stream_info(STREAM)
        return info.state.last_seq

    async def request(self, subject: str, payload: bytes, *, wait: float) -> Msg:
        """Core request/reply: the reply; ``NoResponders`` when nobody serves ``subject``,
        ``BusTimeout`` when nobody answered within ``wait`` s."""
        with translated():
            return await self.nc.request(subject, payload, timeout=wait)

    async def serve_requests(
        self, subject: str, answer: RequestHandler, *, queue: str = ""
    ) -> Served:
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
        served = Served(subject, queue, on_request)
        await served.subscribe(self.nc)
        self._served.append(served)
        return served


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
            NoResponders,
        ) as error:
            if loop.time() + delay > deadline:
                raise
            log.warning("jetstream_unanswered", what=what, error=repr(error))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def _log_error(error: Exception) -> None:
    log.warning("nats_error", error=repr(error))
