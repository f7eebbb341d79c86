"""Reading Berth's event log fast, and the checks and metrics the benchmarks compute from it.

``read_events`` follows the stream ``BERTH`` with an ordered push consumer (one callback per
message, no per-message task as ``fetch`` makes) up to the last sequence at call time.
``quota_violations`` replays the log in stream order, which is the order admission itself saw
the facts in, and reports every instant where a ClusterQueue or a cohort held more than it may.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from shared.bus import STREAM, Bus
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    decode_event,
)

__all__ = ["Violation", "quota_violations", "read_events"]


async def read_events(url: str) -> list[AnyEvent]:
    """Every event in the stream, in stream order (one consumer: one order)."""
    bus = await Bus.connect(url, source="bench-reader")
    try:
        last = (await bus.js.stream_info(STREAM)).state.last_seq
        if last == 0:
            return []
        raw: list[bytes] = []
        done = asyncio.Event()

        async def on_message(msg: object) -> None:
            raw.append(msg.data)  # type: ignore[attr-defined]
            if msg.metadata.sequence.stream >= last:  # type: ignore[attr-defined]
                done.set()

        subscription = await bus.js.subscribe(
            "berth.>", stream=STREAM, cb=on_message, ordered_consumer=True
        )
        await asyncio.wait_for(done.wait(), timeout=600)
        await subscription.unsubscribe()
        return [decode_event(data) for data in raw]
    finally:
        await bus.close()


@dataclass
class Violation:
    owner: str  # ClusterQueue or cohort
    used: int  # milli-CPU
    limit: int
    event_index: int


def quota_violations(
    events: list[AnyEvent],
    *,
    cq_limit: Mapping[str, int],
    cohort_of: Mapping[str, str],
    cohort_limit: Mapping[str, int],
    resource: str = "cpu",
) -> tuple[list[Violation], dict[str, int]]:
    """Instants where usage exceeded a limit, and the peak usage per cohort.

    A workload holds quota from its WorkloadAdmitted until the WorkloadFinished or
    WorkloadEvicted of that generation (or its WorkloadDeleted).
    """
    holding: dict[str, WorkloadAdmitted] = {}
    cq_used: dict[str, int] = {}
    cohort_used: dict[str, int] = {}
    peak: dict[str, int] = {}
    violations: list[Violation] = []

    def amount(admitted: WorkloadAdmitted) -> int:
        return sum(a.usage.get(resource, 0) for a in admitted.assignments)

    for index, event in enumerate(events):
        uid = event.workload.uid
        if isinstance(event, WorkloadAdmitted):
            held = holding.get(uid)
            if held is not None and held.generation >= event.generation:
                continue  # a duplicate never counts twice
            if held is not None:  # admitted again without a release: counts as over-commit
                violations.append(Violation(event.cluster_queue, -1, 0, index))
            holding[uid] = event
            cq = event.cluster_queue
            cohort = cohort_of.get(cq, cq)
            value = amount(event)
            cq_used[cq] = cq_used.get(cq, 0) + value
            cohort_used[cohort] = cohort_used.get(cohort, 0) + value
            peak[cohort] = max(peak.get(cohort, 0), cohort_used[cohort])
            if cq_used[cq] > cq_limit.get(cq, 0):
                violations.append(Violation(cq, cq_used[cq], cq_limit.get(cq, 0), index))
            if cohort_used[cohort] > cohort_limit.get(cohort, 0):
                violations.append(
                    Violation(cohort, cohort_used[cohort], cohort_limit.get(cohort, 0), index)
                )
        elif isinstance(event, WorkloadFinished | WorkloadEvicted | WorkloadDeleted):
            held = holding.get(uid)
            if held is None:
                continue
            if isinstance(event, WorkloadDeleted) or held.generation == event.generation:
                del holding[uid]
                cq = held.cluster_queue
                value = amount(held)
                cq_used[cq] -= value
                cohort_used[cohort_of.get(cq, cq)] -= value
    return violations, peak
