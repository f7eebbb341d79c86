"""Key-value buckets as the bus hands them out: nats-py's ``KeyValue`` whose operations raise
the bus's errors (shared/bus/errors.py), and which says, in public attributes, which bucket
and stream it is (watches and pipelined updates need them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import nats.js.errors
from nats.aio.client import Client, ServerVersion
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from shared.bus.errors import BucketNotFound, BusError, NotFound, translated
from shared.logging import get_logger

__all__ = ["Bucket", "Listeners", "open_bucket"]

log = get_logger("bus")

BATCHES_ASKED_EVERY_S = 30.0
INVALID_STREAM_CONFIG = 10052  # JetStream's err_code for a stream config it refuses
BATCHES_SINCE = (2, 14)  # the first nats-server release with fast batches (allow_batched)

# Called on each reconnect of the connection the bucket was opened on (Bus keeps the set).
Listeners = set[Callable[[], None]]


class Bucket(KeyValue):
    """A key-value bucket: ``name``, its stream ``stream``, and ``prefix``, the subject a
    key's value is stored on without the key. ``reconnects``: told of each reconnect, so a
    watch of the bucket starts again at once (shared/bus/keywatch.py).

    ``batched``: whether its stream takes fast batches (True), cannot (False), or is yet to
    be asked (None: :meth:`allow_batches`).

    Its operations raise the bus's errors: ``KeyNotFound`` (no such key, or deleted),
    ``KeyExists`` (a compare-and-swap lost, or a create of a key that exists),
    ``BusTimeout``, ``NoResponders``, else ``BusError``."""

    def __init__(
        self,
        *,
        name: str,
        nc: Client,
        js: JetStreamContext,
        direct: bool,
        reconnects: Listeners,
        batched: bool | None = None,
    ) -> None:
        self.name = name
        self.batched = batched
        self._ask_batches_at = 0.0  # the clock's time before which allow_batches asks not
        self.clock: Callable[[], float] = time.monotonic
        self.batches_asked_every = BATCHES_ASKED_EVERY_S
        self.nc = nc
        self.reconnects = reconnects
        self.stream = f"KV_{name}"
        self.prefix = f"$KV.{name}."
        self.js = js
        super().__init__(name=name, stream=self.stream, pre=self.prefix, js=js, direct=direct)

    @classmethod
    async def existing(
        cls, nc: Client, js: JetStreamContext, name: str, *, reconnects: Listeners
    ) -> Bucket:
        """The bucket ``name``; ``BucketNotFound`` when there is none."""
        try:
            with translated():
                info = await js.stream_info(f"KV_{name}")
        except NotFound as error:
            raise BucketNotFound(f"no bucket {name}") from error
        direct = bool(info.config.allow_direct)
        batched = True if info.config.allow_batched else None
        return cls(name=name, nc=nc, js=js, direct=direct, reconnects=reconnects, batched=batched)

    async def allow_batches(self) -> bool:
        """Let the bucket's stream take fast batches (``allow_batched``): the bucket is made
        by whoever opens it first, with nats-py's defaults, so its writer turns them on.

        Asked only of a server of :data:`BATCHES_SINCE` or later (the connected one's
        version): the option stamps the stream as needing it, and an older node of the
        cluster (a rolling upgrade, a rollback) would not load the stream. A server that
        refuses the update for good (:func:`_refused_for_good`: one that does not know the
        option, strict about unknown fields) leaves ``batched`` False for good, as does one
        that answers a config without it: plain writes. Any other failure (no permission, a
        timeout, a leader being elected) is asked again after ``batches_asked_every`` s, plain
        writes meanwhile: asking on every write would hold each up for the request's timeout."""
        if self.batched is not None or not _knows_batches(self.nc.connected_server_version):
            return bool(self.batched)
        now = self.clock()
        if now < self._ask_batches_at:
            return False
        self._ask_batches_at = now + self.batches_asked_every
        try:
            with translated():
                config = (await self.js.stream_info(self.stream)).config
                if not config.allow_batched:
                    config.allow_batched = True
                    config = (await self.js.update_stream(config)).config
            self.batched = bool(config.allow_batched)
        except BusError as error:
            if _refused_for_good(error.__cause__):
                self.batched = False
            log.warning(
                "bucket_batches_unset", bucket=self.name, batched=self.batched, error=repr(error)
            )
        return bool(self.batched)

    def stop_batches(self, reason: str) -> None:
        """The stream no longer takes this bucket's fast batches (its option turned off, or a
        leader that does not know them): later writes are plain puts; said once."""
        if self.batched is not False:
            self.batched = False
            log.warning("bucket_batches_stopped", bucket=self.name, reason=reason)

    async def get(
        self, key: str, revision: int | None = None, validate_keys: bool = True
    ) -> KeyValue.Entry:
        with translated():
            return await super().get(key, revision, validate_keys)

    async def put(self, key: str, value: bytes, validate_keys: bool = True) -> int:
        with translated():
            return await super().put(key, value, validate_keys)

    async def create(
        self,
        key: str,
        value: bytes,
        validate_keys: bool = True,
        msg_ttl: float | None = None,
    ) -> int:
        with translated():
            return await super().create(key, value, validate_keys, msg_ttl)

    async def update(
        self, key: str, value: bytes, last: int | None = None, validate_keys: bool = True
    ) -> int:
        with translated():
            return await super().update(key, value, last, validate_keys)

    async def delete(
        self,
        key: str,
        last: int | None = None,
        validate_keys: bool = True,
        msg_ttl: float | None = None,
    ) -> bool:
        with translated():
            return await super().delete(key, last, validate_keys, msg_ttl)

    async def purge(self, key: str, msg_ttl: float | None = None) -> bool:
        with translated():
            return await super().purge(key, msg_ttl)

    async def keys(self, filters: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Every key (``KeyNotFound`` when there is none, as nats-py's ``NoKeysError``)."""
        with translated():
            return await super().keys(filters, **kwargs)  # type: ignore[arg-type]

    async def history(self, key: str) -> list[KeyValue.Entry]:
        with translated():
            return await super().history(key)

    async def status(self) -> KeyValue.BucketStatus:
        with translated():
            return await super().status()


def _refused_for_good(error: BaseException | None) -> bool:
    """Whether a stream update's refusal will not change on asking again: a bad request
    (code 400: an option the server does not know, in strict JSON) or an invalid config
    (err_code :data:`INVALID_STREAM_CONFIG`). Others (no leader, a timeout) may pass."""
    return isinstance(error, nats.js.errors.APIError) and (
        error.code == 400 or error.err_code == INVALID_STREAM_CONFIG
    )


def _knows_batches(version: ServerVersion) -> bool:
    """Whether a nats-server of this version takes fast batches: :data:`BATCHES_SINCE` or
    later (an unreadable version: no)."""
    try:
        return (version.major, version.minor) >= BATCHES_SINCE
    except ValueError:
        return False


async def open_bucket(
    nc: Client,
    js: JetStreamContext,
    name: str,
    *,
    history: int,
    ttl: float | None,
    replicas: int,
    reconnects: Listeners,
) -> Bucket:
    """The bucket ``name``, created on first use."""
    try:
        return await Bucket.existing(nc, js, name, reconnects=reconnects)
    except BucketNotFound:
        try:
            await js.create_key_value(
                bucket=name,
                history=history,
                ttl=ttl,
                storage=api.StorageType.FILE,
                replicas=replicas,
            )
        except nats.js.errors.BadRequestError:
            pass  # another service won the race
        return await Bucket.existing(nc, js, name, reconnects=reconnects)
