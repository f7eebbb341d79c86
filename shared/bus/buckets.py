"""Key-value buckets as the bus hands them out: nats-py's ``KeyValue`` whose operations raise
the bus's errors (shared/bus/errors.py), and which says, in public attributes, which bucket
and stream it is (watches and pipelined updates need them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from shared.bus.errors import BucketNotFound, NotFound, translated

__all__ = ["Bucket", "Listeners", "open_bucket"]

# Called on each reconnect of the connection the bucket was opened on (Bus keeps the set).
Listeners = set[Callable[[], None]]


class Bucket(KeyValue):
    """A key-value bucket: ``name``, its stream ``stream``, and ``prefix``, the subject a
    key's value is stored on without the key. ``reconnects``: told of each reconnect, so a
    watch of the bucket starts again at once (shared/bus/keywatch.py).

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
    ) -> None:
        self.name = name
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
        return cls(name=name, nc=nc, js=js, direct=direct, reconnects=reconnects)

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
