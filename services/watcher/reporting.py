"""The watcher's reports, built the same way by every backend.

Event ids are deterministic, so a report sent twice (a redelivered decision, a re-list, a
restarted watcher) is stored once by the stream's duplicate window, and so admission can tell
a repeat from news: ``submitted-<uid>``, ``started-<uid>-<gen>``, ``finished-<uid>-<gen>``,
``evicted-<uid>-<gen>``, ``deleted-<uid>``. Pure functions: no I/O, no clock except for the
event's own ``time`` and a missing creationTimestamp.

``at``, where a builder takes it: the event's ``time``, one moment read once for the reports
a round makes together (as the statuses written in one round share theirs); without it, the
clock is read for the event. Why: each event reading the clock through its default cost most
of its construction, on the watcher's path for every workload's reports.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from shared.events import (
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadKind,
    WorkloadPodsReady,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
    now,
)
from shared.workloads import WorkloadSpec

__all__ = [
    "SOURCE",
    "deleted",
    "evicted",
    "finished",
    "pods_ready",
    "ref_of",
    "started",
    "submitted",
]

SOURCE = "watcher"


def ref_of(obj: dict[str, Any]) -> WorkloadRef:
    """The identity of a Job, Pod or RayJob mapping."""
    metadata = obj["metadata"]
    return WorkloadRef(
        namespace=str(metadata.get("namespace") or "default"),
        name=str(metadata["name"]),
        uid=str(metadata["uid"]),
    )


def created_at(obj: dict[str, Any]) -> datetime:
    """``metadata.creationTimestamp`` (queue order starts there); now if the field is absent."""
    text = (obj.get("metadata") or {}).get("creationTimestamp")
    if not text:
        return datetime.now(UTC)
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(UTC)


def submitted(
    obj: dict[str, Any],
    spec: WorkloadSpec,
    *,
    queue_name: str | None = None,
    at: datetime | None = None,
) -> WorkloadSubmitted:
    """``queue_name`` overrides the object's own (a namespace's ``default`` LocalQueue)."""
    metadata = obj["metadata"]
    return WorkloadSubmitted(
        id=f"submitted-{metadata['uid']}",
        time=at or now(),
        source=SOURCE,
        workload=ref_of(obj),
        kind=cast(WorkloadKind, spec.kind),
        queue_name=queue_name if queue_name is not None else spec.queue_name,
        pod_sets=spec.pod_sets,
        created=created_at(obj),
        priority_class=spec.priority_class,
        priority_class_name=spec.priority_class_name,
        priority=spec.priority,
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
    )


def pods_ready(
    ref: WorkloadRef,
    generation: int,
    *,
    ready: bool = True,
    first: bool = True,
    at: datetime | None = None,
) -> WorkloadPodsReady:
    """Every pod of this admission is ready (waitForPodsReady counts from its admission), or
    with ``ready`` false, pods that were ready lost readiness (recoveryTimeout counts from
    then). The first readiness has one id per admission; a later loss or recovery (not
    ``first``) is a new fact each time, with its own id."""
    if first:
        return WorkloadPodsReady(
            id=f"podsready-{ref.uid}-{generation}",
            time=at or now(),
            source=SOURCE,
            workload=ref,
            generation=generation,
        )
    return WorkloadPodsReady(
        time=at or now(), source=SOURCE, workload=ref, generation=generation, ready=ready
    )


def started(ref: WorkloadRef, generation: int, *, at: datetime | None = None) -> WorkloadStarted:
    return WorkloadStarted(
        id=f"started-{ref.uid}-{generation}",
        time=at or now(),
        source=SOURCE,
        workload=ref,
        generation=generation,
    )


def finished(
    ref: WorkloadRef,
    generation: int,
    *,
    succeeded: bool,
    exit_code: int | None = None,
    message: str = "",
    at: datetime | None = None,
) -> WorkloadFinished:
    return WorkloadFinished(
        id=f"finished-{ref.uid}-{generation}",
        time=at or now(),
        source=SOURCE,
        workload=ref,
        generation=generation,
        succeeded=succeeded,
        exit_code=exit_code,
        message=message,
    )


def evicted(
    ref: WorkloadRef, generation: int, *, reason: str, message: str = ""
) -> WorkloadEvicted:
    return WorkloadEvicted(
        id=f"evicted-{ref.uid}-{generation}",
        source=SOURCE,
        workload=ref,
        generation=generation,
        reason=reason,
        message=message,
    )


def deleted(ref: WorkloadRef) -> WorkloadDeleted:
    return WorkloadDeleted(id=f"deleted-{ref.uid}", source=SOURCE, workload=ref)
