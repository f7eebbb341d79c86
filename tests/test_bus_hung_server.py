"""A server that stops answering without closing the connection (SIGSTOP: hung) is left
once its pings go unanswered (shared/bus/connection.py PING_INTERVAL_S), not after
nats-py's default of minutes. Against a real nats-server, frozen."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import shared.bus.connection as connection
from berth_cli.natsserver import NatsServer
from shared.bus import Bus
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
