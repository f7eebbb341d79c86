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
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
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

__all__ = ["EventType", "Listed", "WatchEvent", "WatchSettings", "watch_objects"]

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
) -> AsyncGenerator[Listed | WatchEvent, None]:
    """Yield a :class:`Listed` after every list, then :class:`WatchEvent` s; never returns.

    ``resources`` are alternatives for one kind, preferred first (e.g. Kueue's v1beta2 then
    v1beta1): the first one the server serves is used.
    """
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
        yield Listed(resource=resource, objects=objects)
        while True:  # the inner loop: watch from the newest resourceVersion
            try:
                async for item in _watch_once(
                    client, resource, version, namespace=namespace, settings=settings
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
) -> AsyncIterator[WatchEvent | str]:
    """One watch request; yields events and bookmark versions (as ``str``) until it ends."""
    async with client.watch(
        resource,
        resource_version=version,
        timeout_seconds=settings.server_timeout,
        namespace=namespace,
    ) as response:
        async for line in _lines(response, settings.inactivity_timeout):
            try:
                raw = json.loads(line)
            except ValueError:
                log.warning("watch_malformed_line", resource=str(resource), line=line[:200])
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
            yield WatchEvent(type=EventType(kind), object=obj)


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
