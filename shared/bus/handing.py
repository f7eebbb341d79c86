"""What a consumer's loop hands over, and the waits around it (shared/bus/consuming.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.msg import Msg

from shared.events import AnyEvent

__all__ = [
    "Handed",
    "Handler",
    "Settling",
    "acting_again",
    "cancelled",
    "hand_over",
    "settled",
    "stopped_within",
]

# What a handler may leave in flight when it returns (see Consuming.consume).
Settling = Awaitable[None]
Handler = Callable[[list[AnyEvent]], Awaitable[Settling | None]]
# A piece of a take handed to the acker: the message that acks the take (on its last piece
# only), the piece's events and what the handler left settling.
Handed = tuple[Msg | None, list[AnyEvent], Settling | None]


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def hand_over(queue: asyncio.Queue[Any], item: Any, acker: asyncio.Task[None]) -> bool:
    """Put ``item`` on the acker's queue, waiting for room; False if the acker ended."""
    if acker.done():
        return False
    try:
        queue.put_nowait(item)
        return True
    except asyncio.QueueFull:
        pass
    put = asyncio.create_task(queue.put(item))
    await asyncio.wait({put, acker}, return_when=asyncio.FIRST_COMPLETED)
    if put.done():
        return True
    await cancelled(put)
    return False


async def settled(handled: Awaitable[Settling | None]) -> None:
    settling = await handled
    if settling is not None:
        await settling


async def acting_again(acting: asyncio.Event, stopping: asyncio.Event) -> bool:
    """Whether this replica may act on the batch in hand: at once while its lease is renewed,
    else once a renewal ends the suspension; False if it stops first."""
    if acting.is_set():
        return True
    waits = [asyncio.create_task(acting.wait()), asyncio.create_task(stopping.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        await cancelled(wait)
    return acting.is_set() and not stopping.is_set()


async def stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
        return True
    except TimeoutError:
        return False
