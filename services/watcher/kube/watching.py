"""List, then watch from the list's resourceVersion, forever: kopf's shape, our words.

- The outer loop lists. It runs at start, after ``410 Gone`` (our resourceVersion fell out of
  the server's window) and after an error inside a watch it cannot resume from. Every list is
  yielded whole as :class:`Listed`, so the consumer can notice objects deleted while it was
  not watching.
- The inner loop watches from the newest resourceVersion seen (list, event or bookmark). A
  stream that ends (the server-side timeout), or goes quiet for longer than the client-side
  inactivity timeout (a half-dead TCP connection never ends by itself), is simply reopened.
- Errors back off exponentially (reset by any success), so a flapping API server is not
  hammered; a resource that does not exist (a CRD not installed: 404 on list) is reported as
  an empty, absent list and retried at a slow pace.
- Cancellation goes straight through: the stream is closed by its context manager.
- No poison pill: a line that is not JSON, an object that is no mapping or has no name (or
  fails the caller's ``check``) is handed to ``malformed`` (a dead letter) or logged, and
  skipped; listing and watching go on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import aiohttp

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import (
    KubeError,
    KubeGone,
    KubeNotFound,
    KubeUnavailable,
    from_status,
    translate,
)
from shared.logging import get_logger

__all__ = [
    "EventType",
    "Listed",
    "Malformed",
    "WatchEvent",
    "WatchSettings",
    "object_problem",
    "watch_objects",
]

# Told of what cannot be handled: (where it came from, why, the raw bytes).
Malformed = Callable[[str, str, bytes], Awaitable[None]]
Check = Callable[[dict[str, Any]], str | None]

log = get_logger("watcher.kube.watching")


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class WatchEvent:
    """One change of one object."""

    type: EventType
    object: dict[str, Any]


@dataclass(frozen=True)
class Listed:
    """The complete set of objects after a (re-)list; ``absent``: the resource is not served."""

    resource: Resource | None
    objects: list[dict[str, Any]] = field(default_factory=list)
    absent: bool = False


@dataclass(frozen=True)
class WatchSettings:
    server_timeout: int = 120  # the server ends each stream after this; we reopen it
    inactivity_timeout: float = 150.0  # no byte for this long: the connection is dead
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    absent_retry: float = 60.0  # how often to look again for a CRD that was not installed


class _Backoff:
    def __init__(self, settings: WatchSettings) -> None:
        self.settings = settings
        self.delay = settings.backoff_initial

    def reset(self) -> None:
        self.delay = self.settings.backoff_initial

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.settings.backoff_max)


async def watch_objects(
    client: KubeClient,
    resources: Sequence[Resource],
    *,
    namespace: str | None = None,
    settings: WatchSettings = WatchSettings(),
    malformed: Malformed | None = None,
    check: Check | None = None,
) -> AsyncGenerator[Listed | WatchEvent, None]:
    """Yield a :class:`Listed` after every list, then :class:`WatchEvent` s; never returns.

    ``resources`` are alternatives for one kind, preferred first (e.g. Kueue's v1beta2 then
    v1beta1): the first one the server serves is used. Only well-formed objects are yielded
    (:func:`object_problem`, then ``check``); the others go to ``malformed``.
    """
    screen = _Screen(malformed, check)
    backoff = _Backoff(settings)
    while True:  # the outer loop: list
        try:
            resource, objects, version = await _list_any(client, resources, namespace=namespace)
        except KubeNotFound:
            yield Listed(resource=None, absent=True)
            await asyncio.sleep(settings.absent_retry)
            continue
        except KubeError as error:
            log.warning("list_failed", resource=str(resources[0]), error=str(error))
            await backoff.sleep()
            continue
        backoff.reset()
        objects = [obj for obj in objects if await screen.passes(obj, resource)]
        yield Listed(resource=resource, objects=objects)
        while True:  # the inner loop: watch from the newest resourceVersion
            try:
                async for item in _watch_once(
                    client, resource, version, namespace=namespace, settings=settings, screen=screen
                ):
                    if isinstance(item, str):
                        version = item  # a bookmark
                        continue
                    version = item.object.get("metadata", {}).get("resourceVersion") or version
                    backoff.reset()
                    yield item
            except KubeGone:
                log.info("watch_expired", resource=str(resource), resource_version=version)
                break  # back to listing
            except TimeoutError:
                log.info("watch_inactive", resource=str(resource))
                continue  # reopen from where we were
            except KubeError as error:
                log.warning("watch_failed", resource=str(resource), error=str(error))
                await backoff.sleep()
                if not isinstance(error, KubeUnavailable):
                    break  # not a network blip: start over from a fresh list
                continue
            # The stream ended normally (server-side timeout): reopen it.


async def _list_any(
    client: KubeClient, resources: Sequence[Resource], *, namespace: str | None
) -> tuple[Resource, list[dict[str, Any]], str]:
    for resource in resources:
        try:
            objects, version = await client.list(resource, namespace=namespace)
        except KubeNotFound:
            continue
        return resource, objects, version
    raise KubeNotFound(f"none of {', '.join(map(str, resources))} is served", status=404)


async def _watch_once(
    client: KubeClient,
    resource: Resource,
    version: str,
    *,
    namespace: str | None,
    settings: WatchSettings,
    screen: _Screen | None = None,
) -> AsyncIterator[WatchEvent | str]:
    """One watch request; yields events and bookmark versions (as ``str``) until it ends."""
    async with client.watch(
        resource,
        resource_version=version,
        timeout_seconds=settings.server_timeout,
        namespace=namespace,
    ) as response:
        async for line in _lines(response, settings.inactivity_timeout):
            screen = screen or _Screen(None, None)
            try:
                raw = json.loads(line)
            except ValueError:
                await screen.report(f"kubernetes {resource} watch", "not JSON", line)
                continue
            if not _is_watch_event(raw):
                await screen.report(f"kubernetes {resource} watch", "not a watch event", line)
                continue
            kind = raw.get("type")
            obj = raw.get("object") or {}
            if kind == "ERROR":
                # Usually 410 Gone ("too old resource version"); the code says which.
                raise from_status(int(obj.get("code") or 500), str(obj.get("message") or obj))
            if kind == "BOOKMARK":
                yield str((obj.get("metadata") or {}).get("resourceVersion") or version)
                continue
            if kind not in EventType.__members__:
                log.warning("watch_unknown_event", resource=str(resource), type=kind)
                continue
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
            if await screen.passes(obj, resource):
                yield WatchEvent(type=EventType(kind), object=obj)


def _is_watch_event(raw: Any) -> bool:
    return isinstance(raw, dict) and isinstance(raw.get("object") or {}, dict)


def object_problem(obj: Any) -> str | None:
    """Why an object cannot be handled at all: not a mapping, metadata not a mapping, or no
    name (everything downstream is keyed on it; workloads check their uid as well)."""
    if not isinstance(obj, dict):
        return "not a mapping"
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return "`metadata` is not a mapping"
    if not isinstance(metadata.get("name"), str) or not metadata["name"]:
        return "`metadata.name` is missing"
    return None


class _Screen:
    """What lets an object through: :func:`object_problem`, then the caller's check."""

    def __init__(self, malformed: Malformed | None, check: Check | None) -> None:
        self.malformed = malformed
        self.check = check

    async def passes(self, obj: Any, resource: Resource) -> bool:
        problem = object_problem(obj)
        if problem is None and self.check is not None:
            problem = self.check(obj)
        if problem is None:
            return True
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        where = ""
        if isinstance(metadata, dict):
            where = f" {metadata.get('namespace') or '-'}/{metadata.get('name') or '-'}"
        raw = json.dumps(obj, default=str).encode()
        await self.report(f"kubernetes {resource}{where}", problem, raw)
        return False

    async def report(self, source: str, reason: str, raw: bytes) -> None:
        if self.malformed is not None:
            await self.malformed(source, reason, raw)
        else:
            text = raw[:200].decode(errors="replace")
            log.warning("watch_malformed", source=source, reason=reason, raw=text)


async def _lines(response: aiohttp.ClientResponse, inactivity: float) -> AsyncIterator[bytes]:
    """Split the stream into lines ourselves: aiohttp's readline() refuses lines over 128 KiB,
    and one Kubernetes object can be bigger than that."""
    buffer = bytearray()
    while True:
        try:
            async with asyncio.timeout(inactivity):
                chunk = await response.content.readany()
        except TimeoutError:
            raise
        except (aiohttp.ClientError, OSError) as error:
            raise translate(error) from error
        if not chunk:  # end of stream
            if buffer.strip():
                yield bytes(buffer)
            return
        buffer.extend(chunk)
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if line.strip():
                yield line
