"""The list+watch loop against kmock: events, 410 Gone, disconnects, errors, absent CRDs."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import aiohttp
import kmock
import kmock as km
import pytest

from services.watcher.kube.api import KubeClient
from services.watcher.kube.patching import JOBS, RAYJOBS
from services.watcher.kube.watching import (
    EventType,
    Listed,
    WatchEvent,
    WatchSettings,
    watch_objects,
)

FAST = WatchSettings(
    server_timeout=5,
    inactivity_timeout=0.3,
    backoff_initial=0.01,
    backoff_max=0.05,
    absent_retry=0.05,
)
JOBS_KEY = km.resource("batch/v1/jobs")


def a_job(name: str, version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": version},
        "spec": {},
    }


@pytest.fixture
async def client(kmock: kmock.KubernetesEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient.for_host(str(kmock.url).rstrip("/")) as api:
        yield api


async def take(client: KubeClient, count: int, **kwargs: Any) -> list[Listed | WatchEvent]:
    items: list[Listed | WatchEvent] = []
    async with aclosing(watch_objects(client, [JOBS], settings=FAST, **kwargs)) as stream:
        async with asyncio.timeout(5):
            async for item in stream:
                items.append(item)
                if len(items) == count:
                    break
    return items


def requests(handler: kmock.RawHandler, *, watch: bool) -> list[kmock.Request]:
    return [
        req
        for req in handler
        if req.method == "GET"
        and req.url.path == "/apis/batch/v1/jobs"
        and (req.params.get("watch") == "true") == watch
    ]


async def test_lists_then_streams_changes(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """The first item is the full list; a later change arrives as a watch event."""
    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    # No stream closed for inactivity while "b" is made: reopened, it would replay "b".
    settings = dataclasses.replace(FAST, inactivity_timeout=5)
    items: list[Listed | WatchEvent] = []
    async with aclosing(watch_objects(client, [JOBS], settings=settings)) as stream:
        async with asyncio.timeout(10):
            async for item in stream:
                items.append(item)
                if len(items) == 2:  # the watch replayed "a": it is open, "b" comes live
                    async with aiohttp.ClientSession() as session:
                        url = f"{str(kmock.url).rstrip('/')}/apis/batch/v1/namespaces/ns/jobs"
                        await session.post(url, json=a_job("b"))
                if len(items) == 3:
                    break
    assert isinstance(items[0], Listed) and [o["metadata"]["name"] for o in items[0].objects] == [
        "a"
    ]
    # kmock's native watch replays existing objects as ADDED first, then live events.
    assert [
        (i.type, i.object["metadata"]["name"]) for i in items[1:] if isinstance(i, WatchEvent)
    ] == [
        (EventType.ADDED, "a"),
        (EventType.ADDED, "b"),
    ]
    watch = requests(kmock, watch=True)[0]
    assert watch.params["allowWatchBookmarks"] == "true"
    assert watch.params["resourceVersion"] == "..."  # kmock's list resourceVersion, passed on


async def test_gone_goes_back_to_listing(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A 410 Gone ERROR event ends the watch and triggers a fresh list."""
    calls = []

    def expired(_: km.Request) -> Any:
        calls.append(1)
        if len(calls) > 1:
            return None  # later watches: fall through to kmock's native behaviour
        return {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}

    kmock[km.params(watch="true")] << expired
    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    items = await take(client, 3)
    assert [type(i) for i in items] == [Listed, Listed, WatchEvent]
    assert len(requests(kmock, watch=False)) == 2


async def test_disconnect_resumes_from_last_version(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A stream that ends is reopened from the newest resourceVersion seen, without a re-list."""
    calls = []

    def one_event_then_close(_: km.Request) -> Any:
        calls.append(1)
        if len(calls) > 1:
            return None  # fall through to kmock's native behaviour
        return {"type": "MODIFIED", "object": a_job("a", version="42")}

    kmock[km.params(watch="true")] << one_event_then_close
    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    items = await take(client, 3)
    assert [type(i) for i in items] == [Listed, WatchEvent, WatchEvent]
    assert len(requests(kmock, watch=False)) == 1
    assert [r.params["resourceVersion"] for r in requests(kmock, watch=True)] == ["...", "42"]


async def test_bookmarks_advance_the_version_silently(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A BOOKMARK is not yielded but its resourceVersion is where the next watch starts."""
    calls = []

    def bookmark(_: km.Request) -> Any:
        calls.append(1)
        if len(calls) > 1:
            return None  # fall through to kmock's native behaviour
        return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}

    kmock[km.params(watch="true")] << bookmark
    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    items = await take(client, 2)
    assert [type(i) for i in items] == [Listed, WatchEvent]
    assert [r.params["resourceVersion"] for r in requests(kmock, watch=True)] == ["...", "99"]


async def test_errors_back_off_and_recover(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A failing list (500) is retried after a back-off until it succeeds."""
    failures = [1, 1]

    def flaky(request: km.Request) -> Any:
        if failures and request.params.get("watch") != "true":
            failures.pop()
            # Raised, not returned: a returned km.Response's status sticks to the reaction.
            raise km.KubernetesError(status=500, reason="Boom", message="flaky")
        return None

    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    kmock["get /apis/batch/v1/jobs"] << flaky
    items = await take(client, 1)
    assert isinstance(items[0], Listed)
    assert len(requests(kmock, watch=False)) == 3


async def test_inactive_stream_is_reopened(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A stream silent for longer than the inactivity timeout is closed and reopened."""
    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    # kmock's native watch sends nothing after its replay, so only the timeout ends it; the
    # reopened stream replays "a" again: that third item proves the reopening.
    items = await take(client, 3)
    assert [type(i) for i in items] == [Listed, WatchEvent, WatchEvent]
    assert len(requests(kmock, watch=True)) == 2
    assert len(requests(kmock, watch=False)) == 1


async def test_absent_resource_is_reported_and_retried(client: KubeClient) -> None:
    """A resource the server does not serve (CRD not installed) yields absent lists, no error."""
    items: list[Listed | WatchEvent] = []
    async with aclosing(watch_objects(client, [RAYJOBS], settings=FAST)) as stream:
        async for item in stream:
            items.append(item)
            if len(items) == 2:
                break
    assert all(isinstance(i, Listed) and i.absent for i in items)
