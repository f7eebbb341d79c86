"""Key-value buckets as the bus hands them out: nats-py's ``KeyValue`` that also says, in
public attributes, which bucket and stream it is (watches and pipelined updates need them)."""

from __future__ import annotations

from collections.abc import Callable

import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

__all__ = ["Bucket", "Listeners", "open_bucket"]

# Called on each reconnect of the connection the bucket was opened on (Bus keeps the set).
Listeners = set[Callable[[], None]]


class Bucket(KeyValue):
    """A key-value bucket: ``name``, its stream ``stream``, and ``prefix``, the subject a
    key's value is stored on without the key. ``reconnects``: told of each reconnect, so a
    watch of the bucket starts again at once (shared/bus/watching.py)."""

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
        """The bucket ``name``; nats-py's ``BucketNotFoundError`` when there is none."""
        try:
            info = await js.stream_info(f"KV_{name}")
        except nats.js.errors.NotFoundError as error:
            raise nats.js.errors.BucketNotFoundError() from error
        direct = bool(info.config.allow_direct)
        return cls(name=name, nc=nc, js=js, direct=direct, reconnects=reconnects)


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
    except nats.js.errors.BucketNotFoundError:
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
