"""`berth status`: every component it can see, which replica of each role acts, and since when.

It reads the replicas' records from the ``berth-members`` bucket (shared/membership.py) and
what it can learn of the NATS server through nats-py's public API and JetStream's answers
(:func:`server_facts`). A role without any record is listed as ``missing``; a record whose
heartbeat is older than 3 s as ``lost``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from berth_cli import get as get_output
from berth_cli.client import connect
from shared.bus import STREAM, Bus, BusError, bus_call
from shared.membership import ROLE_ORDER, Member, health_at, read_members

__all__ = ["nats_summary", "server_facts", "status", "status_rows"]

HEADERS = ("COMPONENT", "REPLICA", "PID", "ACTIVE", "SINCE", "HEALTH", "DETAIL")


async def _gather(nats_url: str) -> tuple[list[Member], dict[str, Any]]:
    async with connect(nats_url) as bus:
        members = await read_members(bus)
        info = await server_facts(bus)
    return members, info


async def server_facts(bus: Bus) -> dict[str, Any]:
    """The NATS server as :func:`nats_summary` reads it (the keys of its INFO), from public
    sources: nats-py's ``connected_server_version``, ``connected_url`` and ``servers`` (the
    pool, with the servers a cluster advertised); JetStream's account info (is it on?) and
    the event stream's cluster info: a cluster's name, and a lone server's own name (it
    leads every stream). In a cluster the server is named by its address: which node
    answers a client is in nats-py's private state only."""
    nc = bus.nc
    version = nc.connected_server_version
    facts: dict[str, Any] = {
        "server_name": nc.connected_url.netloc if nc.connected_url else "",
        "version": f"{version.major}.{version.minor}.{version.patch}"
        + (f"-{version.dev}" if version.dev else ""),
        "cluster": "",
        "jetstream": False,
        "connect_urls": [server.netloc for server in nc.servers],
    }
    try:
        await bus_call(bus.js.account_info())
        facts["jetstream"] = True
        cluster = (await bus_call(bus.js.stream_info(STREAM))).cluster
    except BusError:
        return facts  # JetStream off, or no event stream yet
    if cluster is not None and cluster.name:
        facts["cluster"] = cluster.name
    elif cluster is not None and cluster.leader:
        facts["server_name"] = cluster.leader
    return facts


def nats_summary(info: dict[str, Any]) -> dict[str, Any]:
    """What `berth status` shows of the NATS server: its name, version, cluster and the
    other servers it advertises to clients."""
    return {
        "server": info.get("server_name") or info.get("server_id", ""),
        "version": info.get("version", ""),
        "cluster": info.get("cluster", ""),
        "jetstream": bool(info.get("jetstream")),
        "connect_urls": list(info.get("connect_urls") or []),
    }


def status_rows(
    members: list[Member], nats: dict[str, Any], *, now: datetime | None = None
) -> list[list[str]]:
    """One row for NATS, one per replica (by role), one per role that has none."""
    moment = now or datetime.now(UTC)
    detail = f"v{nats['version']}" if nats["version"] else ""
    if nats["cluster"]:
        detail += f", cluster {nats['cluster']}"
        if len(nats["connect_urls"]) > 1:
            detail += f" ({len(nats['connect_urls'])} servers)"
    rows = [["nats", nats["server"], "", "", "", "connected", detail]]
    for member in members:
        rows.append(
            [
                member.role,
                member.replica,
                str(member.pid),
                "yes" if member.active else "no",
                get_output.age(member.since, now=moment),
                health_at(member, moment),
                f"term {member.term}, {member.http}" if member.active else member.http,
            ]
        )
    present = {member.role for member in members}
    rows += [[role, "", "", "", "", "missing", ""] for role in ROLE_ORDER if role not in present]
    return rows


@click.command()
@click.option("-o", "--output", type=click.Choice(["json"]), default=None)
@click.pass_obj
def status(nats_url: str, output: str | None) -> None:
    """Every component: NATS and each service replica, which one acts, since when, health."""
    members, info = asyncio.run(_gather(nats_url))
    nats = nats_summary(info)
    if output == "json":
        now = datetime.now(UTC)
        replicas = [
            {**msgspec.to_builtins(member), "health": health_at(member, now)} for member in members
        ]
        click.echo(json.dumps({"nats": nats, "replicas": replicas}, indent=2))
        return
    get_output.print_table(HEADERS, status_rows(members, nats), empty="")
