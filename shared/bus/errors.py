"""The bus's errors: what callers outside shared/bus catch, never nats-py's own.

nats-py's errors are translated here, at the bus's boundary (:func:`translated`), with the
original chained as the cause: code outside shared/bus says what went wrong in the bus's
terms, and the client library can change without touching it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Iterator
from typing import TypeVar

import nats.errors
import nats.js.errors

__all__ = [
    "BucketNotFound",
    "BusError",
    "BusTimeout",
    "ConsumerGone",
    "KeyExists",
    "KeyNotFound",
    "NoResponders",
    "NoStream",
    "NotFound",
    "PermissionDenied",
    "Refused",
    "bus_call",
    "translated",
]

T = TypeVar("T")


class BusError(RuntimeError):
    """The bus could not be reached or refused an operation; the cause is chained."""


class BusTimeout(BusError, TimeoutError):
    """No answer in time: whether the operation happened is unknown."""


class NoResponders(BusError):
    """Nobody listens on the subject: the service asked is not running, or no stream takes
    the subject (in a NATS cluster, for a moment while its leader is elected)."""


class NotFound(BusError):
    """What was asked for does not exist: a stream, a consumer, a message."""


class ConsumerGone(NotFound):
    """The server no longer has a consumer this process reads (deleted, or removed once it
    went unread past its inactive threshold: a connection that hung that long). What it
    would have delivered next cannot be asked of it: the service stops and, started again,
    reads the stream anew."""


class BucketNotFound(NotFound):
    """The key-value bucket does not exist (yet)."""


class KeyNotFound(NotFound):
    """The key does not exist, or its last entry records a deletion."""


class KeyExists(BusError):
    """A compare-and-swap lost: the key's last revision is not the one expected (for a
    create: the key exists)."""


class Refused(BusError):
    """The server answered the operation with an error (a bad request, a limit)."""


class PermissionDenied(BusError):
    """NATS refused this connection an operation outside its user's permissions: ``action``
    (``publish`` or ``subscribe``) on ``subject``. NATS keeps the connection open, so a
    request whose publish was refused would otherwise wait for a reply that never comes
    (shared/bus/violations.py)."""

    def __init__(self, action: str, subject: str) -> None:
        super().__init__(f'NATS refused a permission: may not {action} to "{subject}"')
        self.action = action
        self.subject = subject


class NoStream(BusError):
    """No stream answered a publish: retried like a timeout (the stream may be starting)."""


def translate(error: BaseException) -> BusError:
    """The bus's error for one of nats-py's (the most specific that applies)."""
    message = str(error) or type(error).__name__
    if isinstance(error, nats.js.errors.KeyWrongLastSequenceError):
        return KeyExists(message)
    if isinstance(
        error,
        nats.js.errors.KeyNotFoundError
        | nats.js.errors.KeyDeletedError
        | nats.js.errors.NoKeysError,
    ):
        return KeyNotFound(message)
    if isinstance(error, nats.js.errors.BucketNotFoundError):
        return BucketNotFound(message)
    if isinstance(error, nats.js.errors.NotFoundError):
        return NotFound(message)
    if isinstance(error, nats.errors.NoRespondersError | nats.js.errors.ServiceUnavailableError):
        return NoResponders(message)
    if isinstance(error, TimeoutError):  # nats-py's TimeoutError is one too
        return BusTimeout(message)
    if isinstance(error, nats.js.errors.APIError):
        return Refused(message)
    return BusError(message)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Around calls on nats-py objects: their errors leave as the bus's (cause chained)."""
    try:
        yield
    except BusError:
        raise
    except (nats.errors.Error, TimeoutError) as error:
        raise translate(error) from error


async def bus_call(call: Awaitable[T]) -> T:
    """Await one call on a nats-py object (``await bus_call(js.stream_info(STREAM))``); its
    errors leave as the bus's."""
    with translated():
        return await call
