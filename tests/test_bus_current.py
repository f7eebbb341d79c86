"""The handle on a connection's current nats-py client (shared/bus/current.py): what it
defines itself, to be read without ``__getattr__``'s failed lookup, must still be the
current client's, before and after the connection signs in anew (a new client)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from shared.bus.current import CurrentClient

# (what is read on the handle, what it is on a client, why)
READS: list[tuple[str, Callable[[Client], Any], str]] = [
    ("is_closed", lambda client: client.is_closed, "a consumer's loop ends on a closed client"),
    ("is_connected", lambda client: client.is_connected, "publishes ride out an outage"),
    ("is_draining", lambda client: client.is_draining, "a take stops on a draining client"),
]


@pytest.mark.parametrize(("name", "read", "why"), READS, ids=[c[0] for c in READS])
async def test_each_state_is_the_current_clients(
    nats_url: str, name: str, read: Callable[[Client], Any], why: str
) -> None:
    """Three clients, each in another state (connected, draining, closed): after each swap,
    the handle reads the state of the client it now stands for."""
    live, draining, closed = [await nats.connect(nats_url) for _ in range(3)]
    await closed.close()
    release, handling = asyncio.Event(), asyncio.Event()

    async def held(_: Any) -> None:  # keeps ``draining`` draining until released
        handling.set()
        await release.wait()

    await draining.subscribe("current.held", cb=held)
    await draining.publish("current.held", b"")
    await handling.wait()
    drain = asyncio.create_task(draining.drain())
    while not draining.is_draining:  # noqa: ASYNC110 (nats-py signals no start of a drain)
        await asyncio.sleep(0)
    handle = CurrentClient(live)
    try:
        seen = []
        for client in (live, draining, closed, live):
            handle.client = client
            assert getattr(handle, name) == read(client), why
            seen.append(getattr(handle, name))
        assert len(set(seen)) == 2, f"{name} differs between the clients: {seen}"
    finally:
        release.set()
        await drain
        await live.close()


async def test_a_publish_goes_out_on_the_current_client(nats_url: str) -> None:
    """Publishes and copies are sent on whichever client is current when each is sent, even
    through a ``publish`` read from the handle before the swap (publishing.py keeps one for
    a whole round)."""
    first, second, reader = [await nats.connect(nats_url) for _ in range(3)]
    got: asyncio.Queue[tuple[bytes, dict[str, str] | None]] = asyncio.Queue()

    async def received(msg: Any) -> None:
        await got.put((msg.data, msg.headers))

    await reader.subscribe("current.>", cb=received)
    await reader.flush()
    handle = CurrentClient(first)
    publish = handle.publish
    try:
        await publish("current.a", b"1", headers={"Nats-Msg-Id": "a"})
        handle.client = second
        await publish("current.b", b"2", reply="current.reply")
        await handle.publish("current.c", b"3")
        await first.flush()
        await second.flush()
        assert first.stats["out_msgs"] == 1, "only the first publish on the first client"
        assert second.stats["out_msgs"] == 2, "the two after the swap on the second"
        # two connections: the server may deliver the second's before the first's
        messages = sorted([await asyncio.wait_for(got.get(), 10) for _ in range(3)])
        assert messages == [(b"1", {"Nats-Msg-Id": "a"}), (b"2", None), (b"3", None)]
    finally:
        for client in (first, second, reader):
            await client.close()
