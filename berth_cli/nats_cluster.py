"""The NATS side of `berth up`: one server, or a JetStream cluster of N nodes on loopback.

Every node includes the generated ``auth.conf`` (clients authenticate with nkeys); a
cluster's routes authenticate too, with a random password kept 0600 in the credentials
directory, so no server without it can join. Each node has its own ``server_name``, store
directory (``<data_dir>/nats-<i>``), client port and route port; the ports are chosen once
and kept, so a node restarted after a crash comes back where its peers and clients expect it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.js import JetStreamContext, api

from berth_cli.natsserver import ClusterSettings, NatsServer
from shared.auth import ClientAuth
from shared.bus import Bus, BusError, bus_call

__all__ = [
    "CLUSTER_NAME",
    "ROUTE_USER",
    "free_port",
    "nats_nodes",
    "port_free",
    "route_password",
    "wait_for_jetstream",
]

CLUSTER_NAME = "berth"
ROUTE_USER = "route"
ROUTE_PASSWORD_FILE = "route.password"


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def route_password(creds_dir: Path) -> str:
    """The cluster's route password: made once (0600, beside the nkey seeds), then kept."""
    path = creds_dir / ROUTE_PASSWORD_FILE
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32))  # URL-safe: it goes into route URLs
    return path.read_text().strip()


def nats_nodes(
    *,
    data_dir: Path,
    creds_dir: Path,
    count: int,
    port: int,
    preexec_fn: Callable[[], None] | None,
) -> list[NatsServer]:
    """The NATS servers of a stack: one (store ``<data_dir>/nats``, config ``nats.conf``), or
    ``count`` cluster nodes. ``port`` is the first node's client port (0: any free port);
    the others take the following ports."""
    auth_conf = creds_dir / "auth.conf"
    if count == 1:
        return [
            NatsServer(
                store_dir=data_dir / "nats", port=port, auth_conf=auth_conf, preexec_fn=preexec_fn
            )
        ]
    route_ports = [free_port() for _ in range(count)]
    password = route_password(creds_dir)
    return [
        NatsServer(
            store_dir=data_dir / f"nats-{index}",
            port=port + index if port else 0,
            auth_conf=auth_conf,
            server_name=f"berth-{index}",
            cluster=ClusterSettings(
                name=CLUSTER_NAME,
                port=route_ports[index],
                routes=tuple(p for i, p in enumerate(route_ports) if i != index),
                user=ROUTE_USER,
                password=password,
            ),
            config_name=f"nats-{index}",
            preexec_fn=preexec_fn,
        )
        for index in range(count)
    ]


def wait_for_jetstream(url: str, auth: ClientAuth, *, replicas: int, timeout: float) -> None:
    """Wait until the cluster can place a stream on ``replicas`` servers (a meta leader is
    elected and knows its peers) and every server answers JetStream requests (knows that
    leader). Before that, a service creating its streams at start-up fails ("no suitable
    peers for placement") or waits out a request nobody answers. Placement is checked by
    making and deleting a small in-memory stream with that many replicas."""
    asyncio.run(_wait_for_jetstream(url, auth, replicas=replicas, within_s=timeout))


PLACEMENT_PROBE = "BERTH_PLACEMENT_PROBE"


async def _wait_for_jetstream(
    url: str, auth: ClientAuth, *, replicas: int, within_s: float
) -> None:
    deadline = time.monotonic() + within_s
    probe = api.StreamConfig(
        name=PLACEMENT_PROBE, storage=api.StorageType.MEMORY, num_replicas=replicas
    )
    await _until(url, auth, deadline, lambda js: _placed(js, probe))
    for server in url.split(","):  # each server on its own: each must know the leader
        await _until(server, auth, deadline, lambda js: js.account_info())


async def _placed(js: JetStreamContext, probe: api.StreamConfig) -> None:
    await js.add_stream(probe)
    await js.delete_stream(PLACEMENT_PROBE)


async def _until(
    url: str,
    auth: ClientAuth,
    deadline: float,
    check: Callable[[JetStreamContext], Awaitable[object]],
) -> None:
    """Retry ``check`` on a connection to ``url`` until it passes or ``deadline`` passes."""
    bus = await Bus.connect(
        url, source="admin", auth=auth, connect_timeout=max(deadline - time.monotonic(), 1.0)
    )
    # Short requests: one sent before the meta leader is known gets no answer at all.
    js = bus.nc.jetstream(timeout=0.5)
    try:
        while True:
            try:
                await bus_call(check(js))
                return
            except BusError as error:
                if time.monotonic() > deadline:
                    raise BusError(f"JetStream not ready at {url}: {error!r}") from error
                await asyncio.sleep(0.1)
    finally:
        await bus.close()
