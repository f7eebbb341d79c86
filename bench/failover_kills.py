"""bench/failover.py's kills: the active replica of a role, or a NATS node (a follower of the
event stream's Raft group, or its leader), each with a probe Job, and the waits that time
the takeover from the bus's member records and the stream's cluster info.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.failover_scenario import NATS_TARGET_S, PROBE, ROLE_TARGET_S, Generator, job
from berth_cli.launcher import LiveStack
from shared.auth import ClientAuth
from shared.bus import STREAM, Bus, BusError, BusSettings, bus_call
from shared.bus.batches import record_of
from shared.membership import Member, health_at, read_members
from shared.subjects import record_subject


@dataclass
class Kill:
    target: str  # a role, or "nats"
    victim: str  # the replica id or NATS server killed
    at: float  # epoch seconds
    probe_uid: str = ""
    successor: str = ""  # who took over: "<replica> (standby)" / "(restarted)", or a server
    active_after: float | None = None  # seconds from the kill until it reported active
    next_admission: float | None = None  # seconds, from the event log
    probe_admitted: float | None = None
    probe_stored: float = 0.0  # seconds from the kill until the probe's create was stored
    led: list[str] | None = None  # NATS: the Raft groups the killed node led (None: a role)

    @property
    def allowed_s(self) -> float:
        """The target of issue 15: 5 s for a role, 1 s for a NATS node, whatever it led (a
        node that led a Raft group on the admission path misses it by that group's
        election, 4-9 s in nats-server: the report says so beside the verdict)."""
        return ROLE_TARGET_S if self.led is None else NATS_TARGET_S


async def poll(check: Callable[[], Any], *, within: float, what: str, every: float = 0.1) -> Any:
    """Await ``check()`` (a coroutine function) until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        try:
            value = await check()
            if value:
                return value
        except (BusError, TimeoutError, OSError):  # a NATS node away
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within:.0f}s")
        await asyncio.sleep(every)


async def _live(bus: Bus, role: str) -> list[Member]:
    now = datetime.now(UTC)
    return [m for m in await read_members(bus) if m.role == role and health_at(m, now) != "lost"]


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def kill_role(bus: Bus, gen: Generator, role: str, within: float) -> Kill:
    async def one_leader_and_a_standby() -> Member | None:
        live = [m for m in await _live(bus, role) if _alive(m.pid)]
        active = [m for m in live if m.active and m.health == "ready"]
        standbys = [m for m in live if not m.active and m.health == "ready"]
        return active[0] if len(active) == 1 and standbys else None

    leader: Member = await poll(
        one_leader_and_a_standby, within=within, what=f"{role}: a leader and a ready standby"
    )
    os.kill(leader.pid, signal.SIGKILL)
    kill = Kill(role, leader.replica, time.time())
    kill.probe_uid = await gen.create(job(f"probe-{role}", PROBE, "low", "100m", 100))
    kill.probe_stored = time.time() - kill.at

    async def successor() -> Member | None:
        for m in await _live(bus, role):
            if m.active and m.pid != leader.pid and m.term > leader.term:
                return m
        return None

    new: Member = await poll(successor, within=within, what=f"{role}: a new leader")
    kind = "restarted" if new.replica == leader.replica else "standby"
    kill.successor = f"{new.replica} ({kind})"
    kill.active_after = _epoch(new.since) - kill.at
    return kill


def bus_auth(stack: LiveStack) -> ClientAuth:
    """The stack's admin: it may write config and objects and read every bucket."""
    return ClientAuth(seed=stack.credentials("admin"))


def _node_pid(stack: LiveStack, node: str) -> int:
    return int((stack.data_dir / "creds" / f"{node}.pid").read_text())


async def _raft_leaders(bus: Bus) -> dict[str, list[str]]:
    """Server name -> the Raft groups it leads: every stream (the event stream, each
    bucket's) and the event stream's durable consumers."""
    led: dict[str, list[str]] = {}
    for info in await bus_call(bus.js.streams_info()):
        if info.cluster is not None and info.cluster.leader:
            led.setdefault(info.cluster.leader, []).append(f"stream {info.config.name}")
    for consumer in await bus_call(bus.js.consumers_info(STREAM)):
        if consumer.config.durable_name and consumer.cluster and consumer.cluster.leader:
            led.setdefault(consumer.cluster.leader, []).append(f"consumer {consumer.name}")
    return led


async def kill_nats(
    bus: Bus, stack: LiveStack, gen: Generator, *, leader: bool, within: float
) -> Kill:
    """SIGKILL one NATS node: a follower of the event stream's Raft group (clients connected
    to it reconnect to another), or its leader (the group must elect a new one first).

    The follower is the one that leads fewest Raft groups: a group whose leader dies stalls
    for its election (:data:`RAFT_ELECTION_S`), so the follower kill measures Berth's own
    failover (reconnects, resumed pulls and watches); what the node led is reported."""

    async def placement() -> tuple[str, list[str]] | None:
        info = await bus_call(bus.js.stream_info(STREAM))
        cluster = info.cluster
        if cluster is None or not cluster.leader:
            return None
        current = [r.name or "" for r in (cluster.replicas or []) if r.current]
        return (cluster.leader, current) if len(current) == 2 else None  # all 3 caught up

    first, followers = await poll(
        placement, within=within, what="the stream's leader and 2 current replicas"
    )
    led = await poll(raft_leaders_or_none(bus), within=within, what="the Raft leaders")
    name = first if leader else min(followers, key=lambda f: (len(led.get(f, [])), f))
    node = "nats-" + name.rsplit("-", 1)[1]  # server berth-<i> is node nats-<i>
    pid = _node_pid(stack, node)
    os.kill(pid, signal.SIGKILL)
    kill = Kill("nats", f"{node} (stream {'leader' if leader else 'follower'})", time.time())
    kill.led = sorted(led.get(name, []))
    kill.probe_uid = await gen.create(job(f"probe-nats-{node}", PROBE, "low", "100m", 100))
    kill.probe_stored = time.time() - kill.at  # its create may be retried while NATS elects

    async def serving() -> str:
        # A fresh connection per look: in one run the bench's own connection, moved to another
        # node, had every JetStream API request time out for a minute while the services went on.
        fresh = await Bus.connect(stack.url, source="bench", auth=bus_auth(stack), retry=False)
        try:
            info = await asyncio.wait_for(bus_call(fresh.js.stream_info(STREAM)), 1.0)
        finally:
            await fresh.close()
        now = (info.cluster.leader or "") if info.cluster else ""
        return now if now and now != name else ""

    try:
        successor: str = await poll(serving, within=20, what="a stream leader", every=0.05)
        kill.active_after = time.time() - kill.at  # polled: up to a connect and 0.05 s late
        kill.successor = f"stream answers, led by {successor}"
    except TimeoutError:
        kill.successor = "stream info unanswered for 20 s"

    async def restarted() -> bool:
        try:
            return _node_pid(stack, node) != pid
        except (OSError, ValueError):  # berth up is rewriting the pid file
            return False

    await poll(restarted, within=within, what=f"{node} restarted")
    return kill


def raft_leaders_or_none(bus: Bus) -> Callable[[], Any]:
    async def look() -> dict[str, list[str]] | None:
        return await _raft_leaders(bus) or None

    return look


async def admitted_since(bus: Bus, moment: float, within: float) -> None:
    """Wait for any admission stamped after ``moment`` (the stream flows again)."""
    seen = asyncio.Event()

    async def on_admitted(msg: Any) -> None:
        # The record, not the copies, which a stack may not keep.
        if any(event.time.timestamp() > moment for event in record_of(msg)):
            seen.set()

    batching = BusSettings.from_env().batching  # the stack's, from the same environment
    subject = record_subject("cq.*.admitted", batching=batching)
    subscription = await bus.nc.subscribe(subject, cb=on_admitted)
    try:
        await asyncio.wait_for(seen.wait(), within)
    finally:
        await subscription.unsubscribe()

