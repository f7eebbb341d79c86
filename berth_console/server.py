"""The console's life: the bus, the feed, the HTTP server, and a clean stop.

Order, as the services do it (shared/service.py): connect to the bus; start the HTTP server
and print its URL; run the feed; on SIGTERM or SIGINT, end every live stream, stop the feed
(its loops end, then are awaited; cancelled after a grace), stop the HTTP server, and drain
the bus. Nothing is left running.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import signal
import sys

from aiohttp import web

from berth_console.app import build_app
from berth_console.feed import BusFeed
from berth_console.model import Model
from berth_console.pages.base import Context
from berth_console.pending import PendingCache
from berth_console.queries import Queries
from berth_console.settings import Settings
from shared.bus import Bus, BusError
from shared.logging import get_logger
from shared.service import PORT_IN_USE_EXIT

__all__ = ["run_console"]

log = get_logger("console")
GRACE_S = 5.0


async def run_console(settings: Settings) -> int:
    """Serve until SIGTERM or SIGINT; returns the process's exit code."""
    try:
        bus = await Bus.connect(
            settings.nats_url, source="console", auth=settings.auth, connect_timeout=30.0
        )
    except BusError as error:
        log.error("bus_unreachable", error=str(error))
        print(f"berth console: {error}", file=sys.stderr)
        return 1
    model = Model()
    queries = Queries(bus)
    feed = BusFeed(bus, model, queries)
    context = Context(
        model=model,
        queries=queries,
        pending=PendingCache(queries),
        actions_enabled=settings.token is not None,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    app = build_app(context, token=settings.token, stopping=stopping)
    # A stream ends on `stopping`; the timeout only bounds a handler that would not.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    feeding: asyncio.Task[None] | None = None
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        try:
            await site.start()
        except OSError as error:
            log.error("cannot_listen", host=settings.host, port=settings.port, error=str(error))
            print(
                f"berth console: cannot listen on {settings.host}:{settings.port}: {error}",
                file=sys.stderr,
            )
            return PORT_IN_USE_EXIT if error.errno == errno.EADDRINUSE else 1
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}/"
        log.info("listening", url=url, nats=settings.nats_url, actions=settings.token is not None)
        if settings.token is not None and not _loopback(settings.host):
            log.warning(
                "token_over_plain_http",
                detail="the operator token crosses the network in clear: put a TLS proxy in front",
            )
        print(f"Berth console: {url}", flush=True)
        feeding = asyncio.create_task(feed.run(), name="console.feed")
        stopped = asyncio.create_task(stopping.wait(), name="console.stopping")
        await asyncio.wait({feeding, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        await asyncio.gather(stopped, return_exceptions=True)
        failed = feeding.done() and not stopping.is_set()
        if failed:
            log.error("feed_failed", exc_info=feeding.exception())
        log.info("stopping")
        return 1 if failed else 0
    finally:
        stopping.set()  # live streams end
        model.changes.close()
        feed.stop()
        if feeding is not None:
            await _ended(feeding)
        await runner.cleanup()
        await bus.close()
        log.info("stopped")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _ended(task: asyncio.Task[None]) -> None:
    """Let ``task`` finish within the grace, then cancel it; either way, await it."""
    done, _ = await asyncio.wait({task}, timeout=GRACE_S)
    if not done:
        log.warning("feed_cancelled", grace_s=GRACE_S)
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
