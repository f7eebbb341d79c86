"""A durable consumer's acks (shared/bus/handing.py ``Acks``, ``ack_in_order``): the latest
settled take is acked at once, or kept while an ack went out less than ``every`` ago and
acked when that time is up or the loop ends; never one that has not settled."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from nats.aio.msg import Msg

from shared.bus.handing import Acks, Handed, Settling, ack_in_order, cancelled
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
    # Half a second: only a stall that long between the two settlings (back to back) would
    # send the second at once; 50 ms was within a loaded machine's reach.
    acks = Acks(send, queue, every=0.5)
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
    """Through the acker: every take acked by the end, none before its settling (a take
    still settling when the loop is stopped: ACKER_CASES)."""
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


@dataclass(frozen=True)
class AckerCase:
    why: str
    every: float
    # Put on the acker's queue in order: "n" take n, settled; "n probe" take n whose settling
    # notes the acks sent when the acker awaits it; "n after m" take n whose settling ends
    # once take m's ack is sent; "n fails" its settling raises; "n never" it never ends;
    # "due" the marker a kept ack's timer puts there.
    pieces: list[str]
    sent: list[int]  # takes whose ack was sent, in order
    seen: list[list[int]] = field(default_factory=list)  # what each probe saw sent
    again: bool = True  # what handling a failed piece again says (False: stopped first)
    again_after: int | None = None  # handling it again ends once this take's ack is sent
    stopped: bool = False  # the loop is stopped (cancelled) once a "never" settling is reached


ACKER_CASES = [
    AckerCase(
        "kept, then a slow settling: the kept ack goes out within the interval (take 3"
        " settles only once take 2 is acked: held behind it, nothing would end)",
        0.05,
        ["1", "2", "3 after 2"],
        [1, 2, 3],
    ),
    AckerCase(
        "A due marker queued before a take acked at once (here the first) does not send the"
        " take kept right after it: the interval counts from the last ack sent",
        HOUR,
        ["1", "2", "due", "3 probe"],
        [1, 3],
        seen=[[1]],
    ),
    AckerCase(
        "A take still settling when the loop is stopped is never acked (nor one after it)",
        AT_ONCE,
        ["1", "2 never", "3"],
        [1],
        stopped=True,
    ),
    AckerCase(
        "A failed settling handled again is acked as if it had settled",
        AT_ONCE,
        ["1", "2 fails", "3"],
        [1, 2, 3],
    ),
    AckerCase(
        "kept, then a failed settling handled again slowly: the kept ack goes out within"
        " the interval (handling take 3 again ends only once take 2 is acked)",
        0.05,
        ["1", "2", "3 fails"],
        [1, 2, 3],
        again_after=2,
    ),
    AckerCase(
        "A failed settling the service stopped before handling again: what settled before it"
        " is acked (the kept take too), then the loop stops and nothing after is acked",
        HOUR,
        ["1", "2", "3 fails", "4"],
        [1, 2],
        again=False,
    ),
]


@pytest.mark.parametrize("case", ACKER_CASES, ids=[c.why for c in ACKER_CASES])
async def test_the_acker_per_case(case: AckerCase) -> None:
    sent: list[int] = []
    seen: list[list[int]] = []
    acked: dict[int, asyncio.Future[None]] = {}  # take -> done once its ack is sent
    reached = asyncio.Event()  # a settling that never ends is awaited
    loop = asyncio.get_running_loop()

    async def send(last: Msg) -> None:
        number = int(last.reply.removeprefix("ack."))
        sent.append(number)
        acked.setdefault(number, loop.create_future()).set_result(None)

    async def again(events: list[AnyEvent]) -> bool:
        if case.again_after is not None:
            await acked.setdefault(case.again_after, loop.create_future())
        return case.again

    async def probe() -> None:
        seen.append(list(sent))

    async def fails() -> None:
        raise RuntimeError("the write was refused")

    async def never() -> None:
        reached.set()
        await loop.create_future()

    def settling(how: list[str]) -> Settling | None:
        if not how:
            return None
        if how[0] == "after":
            return acked.setdefault(int(how[1]), loop.create_future())
        return {"probe": probe, "fails": fails, "never": never}[how[0]]()

    queue: asyncio.Queue[Handed | None] = asyncio.Queue(maxsize=len(case.pieces) + 1)
    for piece in case.pieces:
        number, *how = piece.split()
        queue.put_nowait(Acks.due if number == "due" else (take(int(number)), [], settling(how)))
    queue.put_nowait(None)
    acker = asyncio.create_task(ack_in_order(queue, send, again, every=case.every))
    if case.stopped:
        await asyncio.wait_for(reached.wait(), 10)
        await cancelled(acker)
    else:
        await asyncio.wait_for(acker, 10)
    assert (sent, seen) == (case.sent, case.seen), case.why


async def test_an_ack_failing_while_a_later_take_settles_lets_that_settling_end() -> None:
    """Take 2 is kept; while take 3 settles, take 2's ack falls due and fails (the
    connection): take 3's settling still ends (nothing is cut halfway), and the acker raises
    the ack's error, as on any failed ack, without handling take 3 again."""
    ended = asyncio.Event()

    async def send(last: Msg) -> None:
        if last.reply == "ack.2":
            raise ConnectionError("the connection closed")

    async def slow() -> None:
        await asyncio.sleep(0.2)
        ended.set()

    async def again(events: list[AnyEvent]) -> bool:
        raise AssertionError("a failed ack is not a failed settling")

    queue: asyncio.Queue[Handed | None] = asyncio.Queue()
    pieces: list[Handed | None] = [(take(1), [], None), (take(2), [], None), (take(3), [], slow())]
    for piece in [*pieces, None]:
        queue.put_nowait(piece)
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(ack_in_order(queue, send, again, every=0.05), 10)
    assert ended.is_set()
