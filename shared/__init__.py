"""Modules shared by Berth's services, CLI and console (DESIGN.md)."""

from shared.deferred import standing_in

with standing_in(("aiohttp",)):  # nats-py's aiohttp is for ws:// only (shared/deferred.py)
    import nats.aio.transport  # noqa: F401
