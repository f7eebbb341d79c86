"""Reading Berth's event log back, and following quota through it.

For tools that audit a run (the benchmarks, the end-to-end tests, an operator's script):
``read_events`` returns every event in stream order, and ``usage_changes`` replays who held
how much quota when. The stream's order is the order admission itself saw the facts in, so
replaying it shows the usage at every instant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from nats.aio.msg import Msg

from shared.bus import STREAM, Bus
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    decode_event,
    quota_of,
)

__all__ = ["UsageChange", "read_events", "usage_changes"]


async def read_events(url: str, *, within_s: float = 600.0) -> list[AnyEvent]:
    """Every event stored so far, in stream order.

    An ordered push consumer: one callback per message and no per-message task, which is
    what makes reading a 200,000-event log take seconds rather than minutes.
    """
    bus = await Bus.connect(url, source="eventlog", retry=False)
    try:
        last = (await bus.js.stream_info(STREAM)).state.last_seq
        if last == 0:
            return []
        raw: list[bytes] = []
        done = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            raw.append(msg.data)
            if msg.metadata.sequence.stream >= last:
                done.set()

        subscription = await bus.js.subscribe(
            "berth.>", stream=STREAM, cb=on_message, ordered_consumer=True
        )
        await asyncio.wait_for(done.wait(), timeout=within_s)
        await subscription.unsubscribe()
        return [decode_event(data) for data in raw]
    finally:
        await bus.close()


@dataclass(frozen=True, slots=True)
class UsageChange:
    index: int  # position of the event in the log
    cluster_queue: str
    usage: dict[tuple[str, str], int]
    sign: int  # +1 when quota is taken, -1 when released
    # An admission of a workload that still held quota from an earlier one: never legitimate.
    while_holding: bool = False


def usage_changes(events: list[AnyEvent]) -> Iterator[UsageChange]:
    """Each take and release of quota, in order.

    A workload holds quota from its WorkloadAdmitted until the WorkloadFinished or
    WorkloadEvicted of that generation, or its WorkloadDeleted; a duplicate never counts twice.
    """
    holding: dict[str, WorkloadAdmitted] = {}
    for index, event in enumerate(events):
        uid = event.workload.uid
        if isinstance(event, WorkloadAdmitted):
            held = holding.get(uid)
            if held is not None and held.generation >= event.generation:
                continue
            holding[uid] = event
            yield UsageChange(
                index,
                event.cluster_queue,
                quota_of(event.assignments),
                +1,
                while_holding=held is not None,
            )
        elif isinstance(event, WorkloadFinished | WorkloadEvicted | WorkloadDeleted):
            held = holding.get(uid)
            if held is None:
                continue
            if isinstance(event, WorkloadDeleted) or held.generation == event.generation:
                del holding[uid]
                yield UsageChange(index, held.cluster_queue, quota_of(held.assignments), -1)
