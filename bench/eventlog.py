"""A run's event log, read back: what the benchmarks and the end-to-end tests audit.

``read_events`` returns every event in stream order; ``usage_changes`` replays who held how
much quota when. The stream's order is the order admission itself saw the facts in, so
replaying it shows the usage at every instant. ``quota_violations`` reports every instant
where a ClusterQueue or a cohort held more than it may. ``read_events`` signs in with the
credentials it is given (the stack's admin, say); ``signed_in_as`` gives the CLI run in this
process (which takes its credentials from the environment, as a user's shell would) a seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.msg import Msg

from shared.auth import ClientAuth
from shared.bus import STREAM, Bus
from shared.bus.batches import record_of
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    quota_of,
    subject_for,
)
from shared.subjects import subject_family

__all__ = [
    "Published",
    "UsageChange",
    "Violation",
    "published_by_subject",
    "quota_violations",
    "read_events",
    "signed_in_as",
    "usage_changes",
]


async def read_events(url: str, *, auth: ClientAuth, within_s: float = 600.0) -> list[AnyEvent]:
    """Every event stored so far, in stream order: the record, i.e. the events of the
    batches and of single messages, never the per-workload copies of batched events
    (docs/events.md "Batches"), so nothing is counted twice.

    An ordered push consumer: one callback per message and no per-message task, which is
    what makes reading a 200,000-event log take seconds rather than minutes.
    """
    bus = await Bus.connect(url, source="eventlog", auth=auth, retry=False)
    try:
        last = (await bus.js.stream_info(STREAM)).state.last_seq
        if last == 0:
            return []
        events: list[AnyEvent] = []
        done = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            events.extend(record_of(msg))  # batches, not their per-workload copies
            if msg.metadata.sequence.stream >= last:
                done.set()

        subscription = await bus.js.subscribe(
            "berth.>", stream=STREAM, cb=on_message, ordered_consumer=True
        )
        await asyncio.wait_for(done.wait(), timeout=within_s)
        await subscription.unsubscribe()
        return events
    finally:
        await bus.close()


@dataclass(slots=True)
class Published:
    """The events of one subject family in a log, and who published them."""

    count: int = 0
    sources: set[str] = field(default_factory=set)


def published_by_subject(events: list[AnyEvent]) -> dict[str, Published]:
    """The log's events per subject family (``cq.*.admitted``, ``wl.started``...: see
    :func:`shared.subjects.subject_family`), most first; each event's subject is the one it
    was published on (:func:`shared.events.subject_for`)."""
    families: dict[str, Published] = {}
    for event in events:
        published = families.setdefault(subject_family(subject_for(event)), Published())
        published.count += 1
        published.sources.add(event.source)
    return dict(sorted(families.items(), key=lambda item: -item[1].count))


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


@contextlib.contextmanager
def signed_in_as(seed: Path | None) -> Iterator[None]:
    """Within the block, the CLI run in this process (its connection helper reads
    ``BERTH_CREDS``) signs in with ``seed`` (the environment is restored after; None leaves it
    as it is)."""
    if seed is None:
        yield
        return
    before = os.environ.get("BERTH_CREDS")
    os.environ["BERTH_CREDS"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BERTH_CREDS", None)
        else:
            os.environ["BERTH_CREDS"] = before


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
    cq_used: dict[str, int] = {}
    cohort_used: dict[str, int] = {}
    peak: dict[str, int] = {}
    violations: list[Violation] = []
    for change in usage_changes(events):
        cq = change.cluster_queue
        if change.while_holding:  # admitted again without a release: an over-commit
            violations.append(Violation(cq, -1, 0, change.index))
        cohort = cohort_of.get(cq, cq)
        value = change.sign * sum(v for (_, r), v in change.usage.items() if r == resource)
        cq_used[cq] = cq_used.get(cq, 0) + value
        cohort_used[cohort] = cohort_used.get(cohort, 0) + value
        if change.sign < 0:
            continue
        peak[cohort] = max(peak.get(cohort, 0), cohort_used[cohort])
        if cq_used[cq] > cq_limit.get(cq, 0):
            violations.append(Violation(cq, cq_used[cq], cq_limit.get(cq, 0), change.index))
        if cohort_used[cohort] > cohort_limit.get(cohort, 0):
            limit = cohort_limit.get(cohort, 0)
            violations.append(Violation(cohort, cohort_used[cohort], limit, change.index))
    return violations, peak
