"""The bus's errors: what callers outside shared/bus catch, never nats-py's own."""

from __future__ import annotations

__all__ = ["BusError", "NoStream"]


class BusError(RuntimeError):
    """The bus could not be reached or refused an operation; the cause is chained."""


class NoStream(Exception):
    """No stream answered a publish: retried like a timeout (the stream may be starting)."""
