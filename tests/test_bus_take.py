"""A pull pump's take (shared/bus/pulling.py ``PullPump.take``): what has arrived is handed
over at once, else what arrives within the wait, else nothing; an interrupted pump does not
wait at all. On a real connection (the pump's own requests are not needed here)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest
from nats.aio.msg import Msg

from shared.bus import Bus
from shared.bus.pulling import PullPump

LONG = 3600.0  # a wait no case may sit out: the case must end before it


def message(number: int) -> Msg:
    return Msg(_client=None, subject=f"berth.b.wl.submitted.{number}")  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    why: str
    arrived: int  # messages in the buffer before the take
    arriving: int  # messages that arrive while it waits
    interrupted: bool
    wait: float
    limit: int | None
    taken: int


CASES = [
    Case("Arrived before: handed over without waiting.", 2, 0, False, LONG, None, 2),
    Case("At most the limit; the rest stays for the next take.", 3, 0, False, LONG, 2, 2),
    Case("Arriving while it waits: handed over then.", 0, 1, False, LONG, None, 1),
    Case("Nothing within the wait: nothing.", 0, 0, False, 0.05, None, 0),
    Case("Interrupted: no wait at all, however long.", 0, 0, True, LONG, None, 0),
    Case("Interrupted with messages in: still handed over.", 1, 0, True, LONG, None, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
async def test_take(watcher_bus: Bus, case: Case) -> None:
    pump = PullPump(watcher_bus.nc, "berth.unused")
    # Heard from just now: a take that times out does not ask the server again.
    pump.last_request = pump.last_heard = time.monotonic()
    pump.buffer.extend(message(n) for n in range(case.arrived))
    if case.interrupted:
        pump.interrupt()

    def arrive() -> None:
        pump.buffer.extend(message(100 + n) for n in range(case.arriving))
        pump.arrived.set()

    if case.arriving:
        asyncio.get_running_loop().call_later(0.01, arrive)
    taken = await asyncio.wait_for(pump.take(case.limit, wait=case.wait), 30)
    assert len(taken) == case.taken, case.why
    assert len(pump.buffer) == case.arrived + case.arriving - case.taken, case.why
