"""Server-sent events: one stream per open page, coalesced, rendered by the page's view.

A stream waits for a change in its view's topics (or its poll interval), renders a snapshot,
and sends only what differs from what the browser has: a region whose HTML changed, the
additions, or the whole body when the page's structure changed. After each send it rests
``MIN_INTERVAL_S``, so a browser gets at most two updates a second however busy the bus is,
and a burst of events costs one render per open page, not one per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json

from aiohttp import web

from berth_console.markup import Markup
from berth_console.pages.base import Snapshot, View
from shared.logging import get_logger

__all__ = ["FINGERPRINT", "MIN_INTERVAL_S", "fingerprint", "stream"]

log = get_logger("console.live")
MIN_INTERVAL_S = 0.5
HEARTBEAT_S = 15.0  # a comment line this often finds browsers that went away
PAGE = "page"  # the element a structural change replaces (layout.py)
FINGERPRINT = "_v"  # the query parameter carrying the fingerprint of the page as served


def _message(kind: str, payload: dict[str, str]) -> bytes:
    data = json.dumps(payload, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


FINGERPRINTED_REGIONS = 64  # beyond this many, one digest for all (the URL stays short)


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=5).hexdigest()


def fingerprint(snapshot: Snapshot) -> str:
    """Digests of a page as served, its structure's then each region's: the stream's first
    snapshot sends only the regions that differ (a form being filled in is not replaced by
    the same form half a second later, a duration that ticked is)."""
    regions = snapshot.regions
    if len(regions) <= FINGERPRINTED_REGIONS:
        digests = [_digest(region, html) for region, html in regions.items()]
    else:
        digests = [_digest(*(f"{region}\0{html}" for region, html in regions.items()))]
    return ".".join([_digest(repr(snapshot.structure)), *digests])


class _Sent:
    """What the browser has: each region's HTML and the page's structure."""

    def __init__(self, served: str | None) -> None:
        self.served = served  # the fingerprint of the page the browser loaded
        self.regions: dict[str, Markup] = {}
        self.structure: object = object()  # matches nothing: the first snapshot is sent whole

    def _adopt_served(self, snapshot: Snapshot) -> None:
        """Count as sent what the browser already has from the page it loaded."""
        served, self.served = (self.served or "").split("."), None
        current = fingerprint(snapshot).split(".")
        if served[0] != current[0] or len(served) != len(current):
            return  # another structure: the body is sent whole
        self.structure = snapshot.structure
        if len(current) == 2 and len(snapshot.regions) > 1:  # one digest for every region
            if served == current:
                self.regions = dict(snapshot.regions)
            return
        for (region, html), old, new in zip(
            snapshot.regions.items(), served[1:], current[1:], strict=True
        ):
            if old == new:
                self.regions[region] = html

    def updates(self, view: View, snapshot: Snapshot) -> list[bytes]:
        if self.served is not None:
            self._adopt_served(snapshot)
        if snapshot.structure != self.structure:
            self.structure = snapshot.structure
            self.regions = dict(snapshot.regions)
            return [_message("replace", {"id": PAGE, "html": view.body(snapshot)})]
        messages = []
        for region, html in snapshot.regions.items():
            if self.regions.get(region) != html:
                self.regions[region] = html
                messages.append(_message("replace", {"id": region, "html": html}))
        for addition in snapshot.additions:
            payload = {"id": addition.region, "html": addition.html, "at": addition.at}
            messages.append(_message("add", payload))
        return messages


async def stream(request: web.Request, view: View, stopping: asyncio.Event) -> web.StreamResponse:
    """Keep one page live until the browser leaves or the console stops."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a proxy in front must not hold the stream back
        }
    )
    await response.prepare(request)
    changes = view.model.changes
    sent = _Sent(request.query.get(FINGERPRINT))
    loop = asyncio.get_running_loop()
    try:
        await response.write(b"retry: 2000\n\n")
        last_write = loop.time()
        while not stopping.is_set():
            seen = changes.versions(view.topics)
            messages = sent.updates(view, await view.current())
            if not messages and loop.time() - last_write >= HEARTBEAT_S:
                messages = [b": keep-alive\n\n"]
            if messages:
                await response.write(b"".join(messages))
                last_write = loop.time()
            timeout = view.poll_s if view.poll_s is not None else HEARTBEAT_S
            await changes.wait(view.topics, seen, within=timeout)
            with contextlib.suppress(TimeoutError):  # coalesce: rest before the next render
                await asyncio.wait_for(stopping.wait(), MIN_INTERVAL_S)
    except (ConnectionResetError, ConnectionError):
        pass  # the browser left
    return response
