"""A durable consumer's acks (shared/bus/handing.py ``Acks``, ``ack_in_order``): the latest
settled take is acked at once, or kept while an ack went out less than ``every`` ago and
acked when that time is up or the loop ends; never one that has not settled."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from nats.aio.msg import Msg

from shared.bus.handing import Acks, Handed, ack_in_order
from shared.events import AnyEvent

HOUR = 3600.0  # an interval no test outlives: what is kept stays kept
AT_ONCE = 0.0  # no interval: every settled take is acked


def take(number: int) -> Msg:
    """The message that acks take ``number``."""
    return Msg(_client=None, subject="berth.b.wl.submitted", reply=f"ack.{number}")  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    why: str
    every: float
    takes: int  # settled one after the other
    flushed: bool  # the loop ended (flush)
    sent: list[int]  # takes whose ack was sent, in order


CASES = [
    Case("The first take is acked at once.", HOUR, 1, False, [1]),
    Case("A take settled within the interval is kept, not acked.", HOUR, 3, False, [1]),
    Case("The loop's end acks the latest kept take (it covers the others).", HOUR, 3, True, [1, 3]),
    Case("Nothing kept: the end sends nothing more.", HOUR, 1, True, [1]),
    Case("With the interval over, each settled take is acked.", AT_ONCE, 3, False, [1, 2, 3]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
async def test_acks_sent_per_case(case: Case) -> None:
    sent: list[str] = []

    async def send(last: Msg) -> None:
        sent.append(last.reply)

    acks = Acks(send, asyncio.Queue(maxsize=8), every=case.every)
    try:
        for number in range(1, case.takes + 1):
            await acks.settled(take(number))
        if case.flushed:
            await acks.flush()
    finally:
        acks.close()
    assert sent == [f"ack.{n}" for n in case.sent], case.why


async def test_a_kept_ack_is_due_on_the_queue_when_its_time_is_up() -> None:
    """The acker is told through its own queue, so it acks a kept take while idle."""
    sent: list[str] = []

    async def send(last: Msg) -> None:
        sent.append(last.reply)

    queue: asyncio.Queue[Handed | None] = asyncio.Queue(maxsize=8)
    acks = Acks(send, queue, every=0.05)
    try:
        await acks.settled(take(1))
        await acks.settled(take(2))
        assert sent == ["ack.1"], "the second is kept"
        assert await asyncio.wait_for(queue.get(), 10) is acks.due
        await acks.flush()
        assert sent == ["ack.1", "ack.2"]
    finally:
        acks.close()


async def test_the_acker_acks_the_last_take_and_nothing_unsettled() -> None:
    """Through the acker: every take acked by the end, none before its settling; a take
    still settling when the loop is stopped is never acked."""
    sent: list[str] = []
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def send(last: Msg) -> None:
        sent.append(last.reply)

    async def again(events: list[AnyEvent]) -> bool:
        return True

    queue: asyncio.Queue[Handed | None] = asyncio.Queue(maxsize=8)
    acker = asyncio.create_task(ack_in_order(queue, send, again))
    queue.put_nowait((take(1), [], None))
    queue.put_nowait((None, [], None))  # a piece that is not its take's last: acks nothing
    queue.put_nowait((take(2), [], gate))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert "ack.2" not in sent, "not settled yet"
    gate.set_result(None)
    queue.put_nowait(None)
    await asyncio.wait_for(acker, 10)
    assert sent[-1] == "ack.2" and set(sent) <= {"ack.1", "ack.2"}
