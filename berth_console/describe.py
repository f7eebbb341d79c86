"""Events in words: one line per event for timelines and the feed."""

from __future__ import annotations

from berth_console.markup import Markup, render
from berth_console.quota import show
from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    EvictionRequested,
    JobStatusChanged,
    LeaderElected,
    PriorityBoosted,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadStarted,
    WorkloadSubmitted,
)

__all__ = ["cluster_queue_of", "describe", "kind_of"]


def kind_of(event: AnyEvent) -> tuple[str, str]:
    """A short label and a CSS class for the event's kind."""
    match event:
        case WorkloadSubmitted():
            return "Submitted", "submitted"
        case WorkloadPending():
            return "Pending", "pending"
        case WorkloadAdmitted():
            return "Admitted", "admitted"
        case WorkloadStarted():
            return "Started", "started"
        case EvictionRequested():
            return ("Preempted" if event.reason == "Preempted" else "Eviction"), "evict"
        case WorkloadEvicted():
            return "Evicted", "evicted"
        case WorkloadFinished():
            return ("Finished" if event.succeeded else "Failed"), (
                "finished" if event.succeeded else "failed"
            )
        case PriorityBoosted():
            return "Requeued, boosted", "boost"
        case WorkloadDeleted():
            return "Deleted", "deleted"
        case CreateWorkload():
            return "Create", "command"
        case DeleteWorkload():
            return "Delete", "command"
        case JobStatusChanged():
            return "Managed job", "job"
        case SubmitWorkload():
            return "Submit", "command"
        case RemoveWorkload():
            return "Remove", "command"
        case LeaderElected():
            return "Leader", "leader"
    return type(event).__name__, "other"  # pragma: no cover - the union is exhaustive


def cluster_queue_of(event: AnyEvent) -> str:
    queue = getattr(event, "cluster_queue", "")
    return queue if isinstance(queue, str) else ""


def _requests(event: WorkloadSubmitted) -> str:
    parts = []
    for pod_set in event.pod_sets:
        asks = ", ".join(f"{r} {show(r, v)}" for r, v in sorted(pod_set.requests.items()))
        parts.append(f"{pod_set.count} x {pod_set.name} ({asks})")
    return "; ".join(parts)


def describe(event: AnyEvent) -> Markup:
    """What happened, as a sentence with its numbers."""
    match event:
        case WorkloadSubmitted():
            priority = event.priority_class or event.priority_class_name
            return render(
                "$kind to LocalQueue <strong>$queue</strong>$priority: $requests",
                kind=event.kind,
                queue=event.queue_name or "(default)",
                priority=f", priority class {priority}" if priority else "",
                requests=_requests(event),
            )
        case WorkloadPending():
            who = "Preemption: " if event.source == "preemption" else ""
            return render(
                "$who$message (in $queue, priority $priority)",
                who=who,
                message=event.message or event.reason,
                queue=event.cluster_queue,
                priority=event.priority,
            )
        case WorkloadAdmitted():
            flavors = sorted({f"{r}: {f}" for a in event.assignments for r, f in a.flavors.items()})
            return render(
                "to <strong>$queue</strong> (run $generation, priority $priority) on $flavors",
                queue=event.cluster_queue,
                generation=event.generation,
                priority=event.priority,
                flavors=", ".join(flavors) or "no flavor",
            )
        case WorkloadStarted():
            return render("its pods run (run $generation)", generation=event.generation)
        case EvictionRequested():
            by = f" by {event.preemptor.key}" if event.preemptor is not None else ""
            detail = f" ({event.detail})" if event.detail else ""
            return render(
                "$reason$by$detail: $message",
                reason=event.reason,
                by=by,
                detail=detail,
                message=event.message,
            )
        case WorkloadEvicted():
            return render(
                "run $generation stopped, quota released: $why",
                generation=event.generation,
                why=event.message or event.reason,
            )
        case WorkloadFinished():
            code = f", exit code {event.exit_code}" if event.exit_code is not None else ""
            return render(
                "run $generation$code$message",
                generation=event.generation,
                code=code,
                message=f": {event.message}" if event.message else "",
            )
        case PriorityBoosted():
            return render(
                "ageing boost +$boost$reserved",
                boost=event.boost,
                reserved=", first in its queue (reserved)" if event.reserved else "",
            )
        case WorkloadDeleted():
            return render("the object is gone")
        case CreateWorkload():
            return render("recovery asks for the workload object (a managed job's run)")
        case DeleteWorkload():
            return render("recovery asks to delete it (a cancelled managed job)")
        case SubmitWorkload():
            return render("berth submit asks for the workload object")
        case RemoveWorkload():
            return render("berth delete asks to remove the workload")
        case LeaderElected():
            return render(
                "$role: $holder leads with term $term",
                role=event.role,
                holder=event.holder,
                term=event.term,
            )
        case JobStatusChanged():
            return render(
                "job $id is $status (#RECOVERIES $recoveries)$message",
                id=event.job_id,
                status=event.status,
                recoveries=event.recoveries,
                message=f": {event.message}" if event.message else "",
            )
    return render("$type", type=type(event).__name__)  # pragma: no cover
