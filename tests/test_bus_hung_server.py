"""A server that stops answering without closing the connection (SIGSTOP: hung): a service
leaves it once its pings go unanswered (shared/bus/connection.py PING_INTERVAL_S), not after
nats-py's default of minutes, and a command goes on to the next server listed. Against real
nats-servers, one frozen."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

import shared.bus.connection as connection
from berth_cli.natsserver import NatsServer
from shared.auth import ClientAuth
from shared.bus import Bus, BusError
from shared.bus.acks import AckTimeout
from tests.conftest import bus_auth, frozen


async def test_a_hung_server_is_noticed_by_its_pings(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "PING_INTERVAL_S", 0.2)  # the rule, on a short clock
    bus = await Bus.connect(nats_server.url, source="test", auth=bus_auth(nats_server.url))
    left = asyncio.Event()
    noticed = bus._on_disconnect

    async def on_disconnect() -> None:
        left.set()
        await noticed()

    bus._on_disconnect = on_disconnect  # type: ignore[method-assign]
    assert nats_server.process is not None
    pid = nats_server.process.pid
    frozen(pid)
    try:
        # nats-py's own pings (two minutes apart) would leave it connected far longer
        await asyncio.wait_for(left.wait(), 10)
    finally:
        os.kill(pid, signal.SIGCONT)
        await bus.close()


async def test_a_command_goes_on_to_the_next_server_past_a_hung_one(tmp_path: Path) -> None:
    """`BERTH_NATS_URL` lists a cluster's nodes: a command (told not to retry) whose first
    server accepts the connection and never answers goes on to the next, in order; with none
    answering, it says why (a timeout's own text is empty)."""
    with NatsServer(store_dir=tmp_path / "hung") as hung, NatsServer(store_dir=tmp_path / "up") as up:
        assert hung.process is not None
        frozen(hung.process.pid)
        try:
            url = f"{hung.url},{up.url}"
            bus = await Bus.connect(url, source="test", retry=False, auth=ClientAuth())
            try:
                assert bus.nc.connected_url is not None
                assert bus.nc.connected_url.port == up.port
            finally:
                await bus.close()
            with pytest.raises(BusError) as refused:
                await Bus.connect(hung.url, source="test", retry=False, auth=ClientAuth())
            assert str(refused.value).startswith(f"cannot reach NATS at {hung.url}: ")
            assert not str(refused.value).endswith(": "), "no reason given"
        finally:
            os.kill(hung.process.pid, signal.SIGCONT)


async def test_acks_due_on_a_lost_connection_are_retried_at_once(
    nats_server: NatsServer,
) -> None:
    """A publish whose ack was due when the connection was lost: the reply, sent while the
    client was away, is not kept for it, so it fails as timed out at the reconnect and its
    sender retries it then (the message id stores it once), not after the whole timeout.
    (A Job created as a NATS node died was stored seconds late.)"""
    bus = await Bus.connect(nats_server.url, source="test", auth=bus_auth(nats_server.url))
    try:
        await bus.ensure_stream()
        assert nats_server.process is not None
        pid = nats_server.process.pid
        frozen(pid)  # it takes the publish into its socket and answers nothing
        try:
            [waiting] = await bus.acks.send_many([("berth.wl.submitted.a.b", b"{}", None)])
            await bus._on_reconnect()  # as nats-py calls it once connected again
            assert waiting.done() and isinstance(waiting.exception(), AckTimeout)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        await bus.close()
