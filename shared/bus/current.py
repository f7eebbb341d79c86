"""The nats-py client a connection uses now (:class:`CurrentClient`): the same handle before
and after the connection signs in anew with rotated credentials.

Why a handle: nats-py fixes a client's identity (its nkey's public key) when it connects, so
a rotated seed needs a new ``Client``; but JetStream contexts, key-value buckets and pull
subscriptions keep the client they were made with for life. Made with this handle instead,
they reach whichever client is current, and none of them has to be made again.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, cast

from nats.aio.client import Client

__all__ = ["CurrentClient"]


class CurrentClient:
    """Stands for ``client``, which the owning connection replaces when it signs in anew;
    every attribute is the current client's."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    # What is read for every message or take is defined here: an attribute found only by
    # ``__getattr__`` is looked for first on this handle, which raises an AttributeError and
    # drops it, before the client's is read.

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> Coroutine[Any, Any, None]:
        return self.client.publish(subject, payload, reply, headers)

    @property
    def is_closed(self) -> bool:
        return self.client.is_closed

    @property
    def is_connected(self) -> bool:
        return self.client.is_connected

    @property
    def is_draining(self) -> bool:
        return self.client.is_draining

    def as_client(self) -> Client:
        """This handle, typed as what it stands for."""
        return cast(Client, self)
