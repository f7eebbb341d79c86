"""What a scheduling pass's decisions become: the events the leader publishes.

An :class:`~services.admission.scheduler.Admission` becomes a ``WorkloadAdmitted`` (or a
reservation, while admission checks are pending), an
:class:`~services.admission.scheduler.Inadmissible` a ``WorkloadPending``. Each decision is
applied to the workload's display record, counted and logged (one line per decision:
workload, queue, reason) before it is published; a pending workload's message is published
at most once per :data:`PENDING_MESSAGE_INTERVAL_S` (pending_throttle.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec

from services.admission import metrics
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.interning import kept_once
from services.admission.model import Admission, Decision, Inadmissible
from services.admission.pending_throttle import PendingThrottle, Said, said
from services.admission.scheduler import Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.events import (
    ContestedResource,
    Event,
    WorkloadAdmitted,
    WorkloadPending,
    new_event_id,
)
from shared.logging import get_logger

__all__ = ["PENDING_MESSAGE_INTERVAL_S", "Decisions", "log_pending"]

log = get_logger("admission")

# The contested resources of a pending report that has none: one list, never written (a
# pass can report most of a million pending workloads; each would have had its own list).
_NONE_CONTESTED: list[ContestedResource] = []
_CONTESTED: dict[tuple[tuple[str, str, int], ...], list[ContestedResource]] = {}

# A pending workload's message alone (its numbers) is republished at most this often.
PENDING_MESSAGE_INTERVAL_S = 1.0


class Decisions:
    """Turns a pass's decisions into the events to publish (the service's parts, shared)."""

    def __init__(
        self,
        scheduler: Scheduler,
        records: dict[str, WorkloadRecord],
        gates: Gates,
        limits: ExecutionLimits,
        pending_throttle: PendingThrottle,
    ) -> None:
        self.scheduler = scheduler
        self.records = records
        self.gates = gates
        self.limits = limits
        self.pending_throttle = pending_throttle

    def events(self, decisions: list[Decision], outgoing: list[Event]) -> list[Event]:
        """Append the events of ``decisions`` to ``outgoing`` and return it (:meth:`pieces`
        in one piece)."""
        for _ in self.pieces(decisions, outgoing, size=sys.maxsize):
            pass
        return outgoing

    def pieces(
        self, decisions: list[Decision], first: list[Event], *, size: int
    ) -> Iterator[list[Event]]:
        """The events of ``decisions`` in order, in pieces of ``size`` events, the first
        being ``first`` with events appended, so that a large pass's first decisions can be
        published while the rest are made. ``decisions`` is emptied, each let go once it is
        turned into its events (a first pass makes half a million: held to the end, they
        were the step's peak of memory). All the events share the pass's moment."""
        now = time.monotonic()
        wall = time.time()  # queue times and deadlines are epoch seconds
        decided_at = datetime.now(UTC)  # one moment for the pass's events (records share it)
        stamp = decided_at.timestamp()
        records, offer = self.records, self.pending_throttle.offer
        # The last report made, by all it says but its workload, with what the throttle reads
        # of it (said): the next report alike (a queue's heads after it, in a backlog) is its
        # event with another workload. Only the last: a pass's every distinct report kept to
        # its end raised the first pass's peak of memory.
        last: tuple[tuple[object, ...], WorkloadPending, Said] | None = None
        piece = first
        decisions.reverse()  # taken from the end: in their order
        while decisions:
            if len(piece) >= size:
                yield piece
                piece = []
            decision = decisions.pop()
            ref = decision.ref
            record = records.get(ref.uid)
            if type(decision) is Admission:
                piece.append(self._admitted(decision, record, wall, decided_at, stamp))
            elif type(decision) is Inadmissible:
                contested = decision.contested
                priority = self.scheduler.preempting_priority(ref)
                key = (  # every field of its report but the workload
                    decision.cluster_queue,
                    decision.reason,
                    decision.message,
                    priority,
                    decision.preemption_may_help,
                    contested,
                )
                if last is None or last[0] != key:
                    pending = WorkloadPending(
                        id="",  # given one if published now: a held report never goes out
                        source="admission",
                        workload=ref,
                        cluster_queue=decision.cluster_queue or "_",
                        reason=decision.reason,
                        message=decision.message,
                        priority=priority,
                        preemption_may_help=decision.preemption_may_help,
                        contested=_contested(contested) if contested else _NONE_CONTESTED,
                        time=decided_at,
                    )
                    last = (key, pending, said(pending))
                else:
                    pending = msgspec.structs.replace(last[1], workload=ref)
                if record is not None:
                    record.on_pending(pending)  # what `berth get` shows is never held back
                if offer(pending, now, last[2]):
                    pending = msgspec.structs.replace(pending, id=new_event_id())
                    log_pending(pending)
                    piece.append(pending)
        if piece:
            yield piece

    def _admitted(
        self,
        decision: Admission,
        record: WorkloadRecord | None,
        wall: float,
        at: datetime,
        stamp: float,
    ) -> WorkloadAdmitted:
        """The admission's event (``at`` the pass's moment, ``stamp`` its epoch seconds),
        applied to its record, counted and logged."""
        ref = decision.ref
        self.pending_throttle.forget(ref.uid)
        generation = self.scheduler.generation(ref)
        event = WorkloadAdmitted(
            id=f"admitted-{ref.uid}-{generation}",
            source="admission",
            workload=ref,
            cluster_queue=decision.cluster_queue,
            local_queue=decision.local_queue,
            # With its ageing boost: a recovered job is not the first victim again.
            priority=self.scheduler.effective_priority(ref),
            assignments=decision.assignments,
            generation=generation,
            time=at,
        )
        event = self.gates.reserve(event)  # waits for its admission checks, if any
        if record is not None:
            record.on_admitted(event)
        self.limits.admitted(ref.uid, stamp)  # event.time is the pass's moment
        waited = max(0.0, wall - decision.queue_time)
        late = None if decision.due is None else max(0.0, wall - decision.due)
        metrics.admitted(
            cluster_queue=decision.cluster_queue,
            namespace=ref.namespace,
            local_queue=decision.local_queue,
            waited=waited,
            late=bool(late),
            reserved_only=event.reserved_only,
        )
        # One dict, spread once: keywords besides a spread dict make a second dict per line.
        line: dict[str, Any] = {
            "workload": ref.key,
            "queue": decision.cluster_queue,
            "reason": "fits",
            "priority": decision.priority,
            "generation": generation,
            "waited_s": round(waited, 3),
        }
        if decision.weighted_share is not None:  # fair sharing's share, a deadline's lateness
            line["weighted_share"] = decision.weighted_share
        if late is not None:
            line["late_s"] = round(late, 3)
        log.info("reserved" if event.reserved_only else "admitted", **line)
        return event


def _contested(contested: tuple[tuple[str, str, int], ...]) -> list[ContestedResource]:
    """A pending report's contested resources, one list per distinct tuple of them, shared
    by the reports that contest alike and never written (as :data:`_NONE_CONTESTED`)."""
    return kept_once(
        _CONTESTED, contested, lambda: [ContestedResource(f, r, n) for f, r, n in contested]
    )


def log_pending(event: WorkloadPending) -> None:
    """A pending report's line."""
    log.info(
        "pending",
        workload=event.workload.key,
        queue=event.cluster_queue,
        reason=event.reason,
        message=event.message,
    )
