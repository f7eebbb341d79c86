"""`berth status`'s NATS row from a real nats-server (berth_cli/status.py ``server_facts``),
learnt through nats-py's public API and JetStream's answers, never nats-py's private state."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from berth_cli.natsserver import NatsServer, nats_server_binary
from berth_cli.status import nats_summary, server_facts
from shared.bus import Bus
from tests.conftest import bus_auth


def _binary_version() -> str:
    out = subprocess.run(
        [nats_server_binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"v(\d+\.\d+\.\d+\S*)", out)
    assert found is not None, out
    return found.group(1)


# (reason, whether a service made the event stream, the server column: "name" or "address")
CASES = [
    ("a lone server leads the event stream, so its cluster info names it", True, "name"),
    ("before any service made the event stream, the address it was reached at", False, "address"),
]


@pytest.mark.parametrize(("reason", "stream", "shown"), CASES, ids=[c[0] for c in CASES])
async def test_the_nats_row_of_a_lone_server(
    reason: str, stream: bool, shown: str, tmp_path: Path
) -> None:
    with NatsServer(store_dir=tmp_path / "nats", server_name="berth-0") as server:
        bus = await Bus.connect(server.url, source="test", auth=bus_auth(server.url), retry=False)
        try:
            if stream:
                await bus.ensure_stream()
            summary = nats_summary(await server_facts(bus))
        finally:
            await bus.close()
    address = f"127.0.0.1:{server.port}"
    assert summary == {
        "server": "berth-0" if shown == "name" else address,
        "version": _binary_version(),
        "cluster": "",
        "jetstream": True,
        "connect_urls": [address],
    }, reason
