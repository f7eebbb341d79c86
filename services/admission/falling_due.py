"""What falls due for the deciding leader besides a scheduling pass, sent in the same turn as
the pass (services/admission/outbox.py says why a turn's events go out together): the gate
decisions before it, the rest after it."""

from __future__ import annotations

from collections.abc import Iterator

from services.admission import metrics
from services.admission.decisions import log_pending
from services.admission.evictions import deactivation as deactivate
from services.admission.exec_time import DEACTIVATION as EXEC_DEACTIVATION
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.pending_throttle import PendingThrottle
from services.admission.scheduler import Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.events import Event, EvictionRequested, WorkloadAdmitted
from shared.logging import get_logger

__all__ = ["expired", "gate_decisions", "held_reports"]

log = get_logger("admission")


def expired(
    limits: ExecutionLimits, records: dict[str, WorkloadRecord], scheduler: Scheduler, now: float
) -> list[Event]:
    """Evictions for workloads past their maximumExecutionTimeSeconds (exec_time.py)."""
    events: list[Event] = []
    for uid in limits.due(now):
        record = records.get(uid)
        if record is None or record.admission is None or record.finished:
            continue
        ref = record.admission.workload
        generation = scheduler.generation(ref)
        queue = record.admission.cluster_queue
        event = deactivate("maxexec", ref, queue, generation, EXEC_DEACTIVATION)
        record.on_eviction_requested(event)
        log.info("evicting", workload=ref.key, queue=event.cluster_queue, reason=event.reason)
        events.append(event)
    return events


def gate_decisions(gates: Gates, records: dict[str, WorkloadRecord], now: float) -> list[Event]:
    """The due decisions of admission checks and waitForPodsReady, applied to the records
    and counted."""
    gated = gates.due(now)
    for event in gated:
        record = records.get(event.workload.uid)
        if record is not None and isinstance(event, EvictionRequested):
            record.on_eviction_requested(event)
        reserved_at = gates.reserved_at(event.workload.uid)
        if record is not None and isinstance(event, WorkloadAdmitted) and reserved_at:
            metrics.checks_passed(  # every check Ready: admitted now
                cluster_queue=event.cluster_queue,
                namespace=event.workload.namespace,
                local_queue=event.local_queue,
                waited=max(0.0, now - record.queue_time),
                checks_waited=max(0.0, now - reserved_at),
            )
    return gated


def held_reports(throttle: PendingThrottle, now: float, size: int) -> Iterator[list[Event]]:
    """Pending reports whose throttle ended (``now`` monotonic), each logged, in pieces of
    at most ``size`` (``PendingThrottle.due_pieces``)."""
    for piece in throttle.due_pieces(now, size):
        for pending in piece:
            log_pending(pending)
        yield list[Event](piece)  # a list of events (lists are invariant): a shallow copy
