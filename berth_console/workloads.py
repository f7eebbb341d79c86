"""The console's view of every workload: the fold of the event stream into one row each.

Built from the stream rather than from admission's ``workloads`` query: that query renders
every workload of every page it is asked for, so a console polling it would cost admission
work in proportion to the cluster, every refresh; following the stream costs admission
nothing. The stream's order is the order admission saw the facts in, and each handler is
idempotent, so a replay from the start gives the same rows. Pending reasons here may lag by
up to a second (``WorkloadPending`` is coalesced, docs/events.md); the ClusterQueue page
asks admission for its current reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.events import (
    AnyEvent,
    EvictionRequested,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadStarted,
    WorkloadSubmitted,
)

__all__ = ["ACTIVE", "STATUSES", "WorkloadRow", "WorkloadTable"]

# Statuses a row can have, in the order the filter offers them.
STATUSES = ("Pending", "Admitted", "Running", "Evicting", "Succeeded", "Failed")
ACTIVE = frozenset({"Admitted", "Running", "Evicting"})  # holding quota
RESERVED = "Quota reserved, waiting for admission checks"  # docs/admission-checks.md


@dataclass(slots=True)
class WorkloadRow:
    namespace: str
    name: str
    uid: str
    kind: str
    local_queue: str
    created: datetime
    changed: datetime
    cluster_queue: str = ""
    status: str = "Pending"
    reason: str = ""
    priority: int = 0  # effective (base + ageing boost), as admission last reported it
    boost: int = 0
    reserved: bool = False
    generation: int = 0
    admitted_at: datetime | None = None
    flavors: str = ""  # "cpu: on-demand, memory: on-demand"
    evictions: int = 0
    preempted_by: str = ""  # the last preemptor, namespace/name

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def done(self) -> bool:
        return self.status in ("Succeeded", "Failed")


def _flavors(event: WorkloadAdmitted) -> str:
    pairs: dict[str, str] = {}
    for assignment in event.assignments:
        pairs.update(assignment.flavors)
    return ", ".join(f"{resource}: {flavor}" for resource, flavor in sorted(pairs.items()))


class WorkloadTable:
    """Rows by (namespace, name), updated event by event."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], WorkloadRow] = {}

    def apply(self, event: AnyEvent) -> WorkloadRow | None:
        """Fold one event; returns the row it changed (None if it changed none)."""
        ref = event.workload
        key = (ref.namespace, ref.name)
        if isinstance(event, WorkloadSubmitted):
            if key in self.rows and self.rows[key].uid == ref.uid:
                return None  # redelivered
            row = WorkloadRow(
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                kind=event.kind,
                local_queue=event.queue_name,
                created=event.created,
                changed=event.time,
            )
            self.rows[key] = row
            return row
        known = self.rows.get(key)
        if known is None or known.uid != ref.uid:
            return None  # about a workload we never saw submitted (or an older one)
        if isinstance(event, WorkloadDeleted):
            del self.rows[key]
            return known
        if not self._fold(known, event):
            return None
        known.changed = event.time
        return known

    def _fold(self, row: WorkloadRow, event: AnyEvent) -> bool:
        match event:
            case WorkloadPending() if row.status == "Pending":
                if event.source == "admission" or not row.reason:
                    row.reason = event.message or event.reason
                if event.cluster_queue != "_":
                    row.cluster_queue = event.cluster_queue
                row.priority = event.priority
            case WorkloadAdmitted() if event.generation > row.generation and not row.done:
                row.status = "Admitted"
                row.generation = event.generation
                row.cluster_queue = event.cluster_queue
                row.priority = event.priority
                row.admitted_at = event.time
                row.flavors = _flavors(event)
                row.reason = ""
                if event.reserved_only:  # quota held, not started until its checks pass
                    checks = ", ".join(event.admission_checks)
                    row.reason = f"{RESERVED}: {checks}"
            case WorkloadAdmitted() if event.generation == row.generation and not (
                event.reserved_only
            ):
                if not row.reason.startswith(RESERVED):
                    return False
                row.reason = ""  # every admission check is Ready: admitted, about to start
            case WorkloadStarted() if event.generation == row.generation:
                if row.status == "Admitted":
                    row.status = "Running"
            case EvictionRequested() if event.generation == row.generation and row.status in ACTIVE:
                row.status = "Evicting"
                row.reason = event.message or event.reason
                if event.preemptor is not None:
                    row.preempted_by = event.preemptor.key
            case WorkloadEvicted() if event.generation == row.generation and row.status in ACTIVE:
                row.status = "Pending"
                row.evictions += 1
                row.admitted_at = None
                row.reason = f"Evicted: {event.message or event.reason}"
            case WorkloadFinished() if event.generation >= row.generation and not row.done:
                row.status = "Succeeded" if event.succeeded else "Failed"
                row.reason = event.message
            case PriorityBoosted():
                row.boost = event.boost
                row.reserved = event.reserved
            case _:
                return False
        return True
