"""The console's HTTP side, in process: a real aiohttp server on loopback, a model fed
directly (no bus), plain HTTP clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession, web

from berth_console.app import build_app
from berth_console.model import Model
from berth_console.pages.base import Context
from berth_console.pending import PendingCache
from tests.console_data import (
    admitted,
    cluster_queue,
    feed,
    pending,
    preempted,
    serving,
    started,
    submitted,
)

TOKEN = "let-me-in"


@pytest.fixture
def model() -> Model:
    model = Model()
    model.set_queues(
        [cluster_queue("cq", cohort="research", nominal="10", used="2", pending=1, admitted=1)],
        [{"metadata": {"name": "lq", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}}],
    )
    feed(
        model, [submitted("a"), pending("a"), admitted("a"), started("a"), *preempted("a", by="b")]
    )
    feed(model, [submitted("<b>"), pending("<b>", message="<script>alert(1)</script>")])
    return model


@pytest.fixture
async def console(model: Model) -> AsyncIterator[str]:
    context = Context(model=model, queries=None, pending=PendingCache(None), actions_enabled=True)
    async with serving(context, TOKEN) as url:
        yield url


async def test_every_page_renders(console: str) -> None:
    """Each page answers 200 with its heading, a strict content policy and a live stream."""
    async with ClientSession() as http:
        for path, heading in [
            ("/", "Cohort research"),
            ("/cq/cq", "ClusterQueue cq"),
            ("/workloads?namespace=team-a&status=Pending", "Workloads"),
            ("/workloads/team-a/a", "Workload team-a/a"),
            ("/jobs", "Managed jobs"),
            ("/jobs/7", "No managed job 7"),
            ("/events?cq=cq", "Events"),
        ]:
            async with http.get(console + path) as response:
                text = await response.text()
                assert response.status == 200, path
                assert heading in text, path
                assert "script-src 'self'" in response.headers["Content-Security-Policy"]
                assert 'data-stream="/stream/' in text
        async with http.get(console + "/nope") as response:
            assert response.status == 404
        async with http.get(console + "/healthz") as response:
            assert await response.text() == "ok"


async def test_names_and_reasons_are_escaped(console: str) -> None:
    """A workload called <b> with a scripted reason shows as text, everywhere."""
    async with ClientSession() as http:
        for path in ("/workloads", "/events", "/workloads/team-a/%3Cb%3E"):
            async with http.get(console + path) as response:
                text = await response.text()
                assert "<script>alert" not in text and "<b></a>" not in text, path
                assert "&lt;b&gt;" in text, path


async def test_workload_page_tells_the_preemption(console: str) -> None:
    """The timeline (from the shared consumer, no bus here) names the preemptor and boost."""
    async with ClientSession() as http, http.get(console + "/workloads/team-a/a") as response:
        text = await response.text()
    assert "Preempted by team-a/b (InClusterQueue)" in text
    assert "ageing boost +5, first in its queue (reserved)" in text


@pytest.mark.parametrize(
    ("data", "headers", "status"),
    [
        ({}, {}, 403),
        ({"token": "wrong"}, {}, 403),
        ({"token": TOKEN}, {"Origin": "http://evil.example"}, 403),
        ({"token": TOKEN}, {}, 503),  # accepted; this console has no bus to ask recovery
        ({}, {"Authorization": f"Bearer {TOKEN}"}, 503),
    ],
    ids=["no token", "wrong token", "other origin", "form token", "bearer token"],
)
async def test_actions_need_the_token(
    console: str, data: dict[str, str], headers: dict[str, str], status: int
) -> None:
    """A POST without the operator's token (or from another origin) is refused."""
    async with ClientSession() as http:
        async with http.post(console + "/jobs/1/cancel", data=data, headers=headers) as response:
            assert response.status == status
        async with http.post(console + "/cq/cq/stop", data=data, headers=headers) as response:
            assert response.status == status  # 503: no bus to write the queue with


async def test_read_only_console_refuses_every_post(model: Model) -> None:
    """Without BERTH_CONSOLE_TOKEN, even a request with some token is refused."""
    context = Context(model=model, queries=None, pending=PendingCache(None))
    runner = web.AppRunner(build_app(context, token=None, stopping=asyncio.Event()))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with ClientSession() as http:
            async with http.post(
                f"http://{host}:{port}/jobs/1/cancel", data={"token": ""}
            ) as response:
                assert response.status == 403
                assert "read-only" in await response.text()
            async with http.get(f"http://{host}:{port}/jobs") as response:
                assert "Cancel job" not in await response.text()
    finally:
        await runner.cleanup()


async def test_stream_sends_a_change_without_a_reload(console: str, model: Model) -> None:
    """A page's stream sends the regions an event changed, coalesced."""
    async with ClientSession() as http:
        async with http.get(console + "/workloads") as page:
            html = await page.text()
        stream_url = html.split('data-stream="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        async with http.get(console + stream_url) as stream:
            assert stream.headers["Content-Type"] == "text/event-stream"
            await asyncio.sleep(0.1)
            feed(model, [submitted("late"), admitted("late")])
            received = b""
            while b"late" not in received:
                received += await asyncio.wait_for(stream.content.readany(), 5)
    assert b'event: replace\ndata: {"id":"rows"' in received
    assert b'"id":"page"' not in received  # the page as served needed no rebuild
