"""What the lease's tests (shared/lease.py, shared/leadership.py) share: the lease
timings, a free port for a server of their own, and a warmed lease bucket."""

from __future__ import annotations

import socket

from nats.js.kv import KeyValue

from shared.bus import Bus
from shared.lease import LEASE_BUCKET, LeaseSettings

FAST = LeaseSettings.scaled(0.6)  # lapse 0.6 s, renew every 0.2 s, give up after 0.4 s
# Where no lapse is timed: every get and write is bounded at 1 s, not FAST's 0.2 s, which a
# loaded machine can outlast for reasons no such test is about.
ROOMY = LeaseSettings.scaled(3)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _warmed(bus: Bus) -> KeyValue:
    """The lease bucket, its first write already paid: a fresh stream's first write can
    outlast a lease's bound on a loaded machine, and the lease's first take would then fail
    (or land late, and be taken again with term 2) for a reason no test here is about."""
    kv = await bus.kv(LEASE_BUCKET)
    await kv.put("warm-up", b"")
    return kv
