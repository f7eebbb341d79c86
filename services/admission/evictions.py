"""The evictions admission itself asks for (a drain, a time limit, a stop, an admission check's
answer, a pods-ready timeout), built one way."""

from __future__ import annotations

from datetime import datetime

from services.admission.deactivation import Deactivation, deactivating
from shared.events import EvictionRequested, WorkloadRef

__all__ = ["deactivation", "eviction"]


def eviction(
    kind: str,
    ref: WorkloadRef,
    cluster_queue: str,
    generation: int,
    reason: str,
    *,
    message: str = "",
    detail: str = "",
    requeue_at: datetime | None = None,
    deactivated: bool = False,
) -> EvictionRequested:
    """Admission's request to evict one run (``generation``) of a workload.

    Its id is ``<kind>-<uid>-<generation>``: the same decision about the same run, made again
    by a restarted or standby replica, is carried out once (a consumer drops an event id it
    already took, as the stream's duplicate window drops a repeated message: docs/events.md).
    """
    return EvictionRequested(
        id=f"{kind}-{ref.uid}-{generation}",
        source="admission",
        workload=ref,
        cluster_queue=cluster_queue,
        generation=generation,
        reason=reason,
        message=message,
        detail=detail,
        requeue_at=requeue_at,
        deactivated=deactivated,
    )


def deactivation(
    kind: str, ref: WorkloadRef, cluster_queue: str, generation: int, why: Deactivation
) -> EvictionRequested:
    """Admission's request to evict and deactivate one run, with the reason and message of
    ``why`` (:func:`services.admission.deactivation.deactivating`)."""
    return deactivating(eviction(kind, ref, cluster_queue, generation, why.reason), why)
