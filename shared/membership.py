"""Who is running: every replica's record in the ``berth-members`` bucket (``berth status``).

Each service replica writes its :class:`Member` record under ``<role>.<replica>`` every
second and deletes it when it stops cleanly. A record whose heartbeat is older than
:data:`LOST_AFTER_S` belongs to a replica that died without a word (``kill -9``, a lost
node): readers show it as ``lost`` until the bucket's TTL removes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import msgspec
from nats.js.kv import KeyValue

from shared.bus import BucketWatch, Bus, BusError, live_value
from shared.logging import get_logger

__all__ = [
    "HEARTBEAT_S",
    "LOST_AFTER_S",
    "MEMBERS_BUCKET",
    "MEMBER_TTL_S",
    "ROLE_ORDER",
    "Member",
    "health_at",
    "keep_record",
    "member_key",
    "read_members",
]

log = get_logger("membership")

MEMBERS_BUCKET = "berth-members"
HEARTBEAT_S = 1.0
LOST_AFTER_S = 3.0
MEMBER_TTL_S = 900.0  # a lost replica's record stays visible this long
ROLE_ORDER = ("watcher", "admission", "preemption", "recovery")


class Member(msgspec.Struct, frozen=True):
    """One replica as it describes itself (also its ``/status``)."""

    role: str
    replica: str
    pid: int
    host: str
    http: str  # its probes, metrics and /status
    active: bool  # it holds its role's lease and acts
    since: str  # RFC 3339: when it became active, or standby
    term: int  # its lease term (0 while standby)
    health: str  # starting | ready | suspended | stopping (readers add "lost")
    heartbeat: str  # RFC 3339: when it wrote this record


def member_key(role: str, replica: str) -> str:
    return f"{role}.{replica}"


def health_at(member: Member, now: datetime) -> str:
    """A member's health as a reader should show it: ``lost`` once its heartbeat is older
    than :data:`LOST_AFTER_S` (it stopped writing without deleting its record)."""
    beat = datetime.fromisoformat(member.heartbeat.replace("Z", "+00:00"))
    if (now - beat).total_seconds() > LOST_AFTER_S:
        return "lost"
    return member.health


_decoder = msgspec.json.Decoder(Member)


async def read_members(bus: Bus) -> list[Member]:
    """Every record in the bucket, by role (watcher, admission, preemption, recovery) then
    replica; a record that cannot be read is skipped."""
    kv = await bus.kv(MEMBERS_BUCKET, ttl=MEMBER_TTL_S)
    members: list[Member] = []
    for entry in await BucketWatch.snapshot(kv):
        value = live_value(entry)
        if value is None:
            continue
        try:
            members.append(_decoder.decode(value))
        except msgspec.DecodeError as error:
            log.warning("malformed_member", key=entry.key, error=str(error))
    order = {role: index for index, role in enumerate(ROLE_ORDER)}
    return sorted(members, key=lambda m: (order.get(m.role, len(order)), m.role, m.replica))


async def keep_record(bus: Bus, record: Callable[[], Member], finish: asyncio.Event) -> None:
    """Write ``record()`` every :data:`HEARTBEAT_S` until ``finish`` is set, then delete it.
    A bus that cannot be reached is waited out (one warning per outage)."""
    first = record()
    key = member_key(first.role, first.replica)
    kv: KeyValue | None = None
    failing = False
    while not finish.is_set():
        try:
            # Opened in the loop: in a NATS cluster's first seconds the bucket may not answer.
            kv = kv or await bus.kv(MEMBERS_BUCKET, ttl=MEMBER_TTL_S)
            await kv.put(key, msgspec.json.encode(record()))
            failing = False
        except (BusError, TimeoutError) as error:
            if not failing:
                log.warning("membership_unwritten", key=key, error=repr(error))
            failing = True
        try:
            await asyncio.wait_for(finish.wait(), HEARTBEAT_S)
        except TimeoutError:
            pass
    if kv is None:
        return
    try:
        await asyncio.wait_for(kv.delete(key), HEARTBEAT_S)
    except (BusError, TimeoutError):
        pass  # it shows as lost, then the TTL removes it
