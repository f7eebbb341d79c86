"""Admission trusts no fact blindly: what may be folded into the quota books.

The stream is shared; a fact can come from a watcher with a bug, an old version, or a tool
that publishes by hand. A fact that would put a negative, zero or malformed quantity in the
books is refused here, with one log line and a count, and never reaches the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.admission import metrics
from shared.events import AnyEvent, FlavorAssignment, PodSet, WorkloadAdmitted, WorkloadSubmitted
from shared.logging import get_logger
from shared.names import name_problem, show
from shared.quantities import MAX_MILLI

__all__ = ["Refusal", "refusal", "refused"]

log = get_logger("admission.validation")


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # the metric's reason label: few values, stable
    message: str  # for the log: names the field and the value


def refusal(event: AnyEvent) -> Refusal | None:
    """Why a fact may not be folded into quota, or None when it may.

    The rule: a ``WorkloadSubmitted`` or ``WorkloadAdmitted`` is folded only if

    - its workload's namespace is a DNS-1123 label, its name a DNS-1123 subdomain and its
      uid non-empty and safe (as Kubernetes and :mod:`shared.names` define them);
    - the queues it names are valid names (a LocalQueue or ClusterQueue that does not exist
      *yet* is no refusal: as in Kueue, such a workload is pending with that reason);
    - a submitted workload has at least one pod set; each pod set has a unique name, a count
      of at least 1 (a ``min_count`` between 0 and the count) and, per valid resource name,
      a request between 0 and 2^63-1 milli-units (Kubernetes' int64);
    - an admission's assignments have counts >= 0, usage between 0 and 2^63-1 milli-units
      and a flavor for every resource they use.

    Other facts carry no quantity; they are matched by uid and need no check here.
    """
    if not isinstance(event, WorkloadSubmitted | WorkloadAdmitted):
        return None
    ref = event.workload
    for code, value, rule, field in (
        ("invalid_name", ref.namespace, "namespace", "namespace"),
        ("invalid_name", ref.name, "name", "name"),
        ("invalid_name", ref.uid, "uid", "uid"),
    ):
        if (problem := name_problem(value, rule)) is not None:
            return Refusal(code, f"{field} {show(value)}: {problem}")
    if isinstance(event, WorkloadSubmitted):
        if event.queue_name and (problem := name_problem(event.queue_name)) is not None:
            return Refusal("invalid_queue", f"queue {show(event.queue_name)}: {problem}")
        return _pod_sets_refusal(event.pod_sets)
    if (problem := name_problem(event.cluster_queue)) is not None:
        return Refusal("invalid_queue", f"ClusterQueue {show(event.cluster_queue)}: {problem}")
    return _assignments_refusal(event.assignments)


def _pod_sets_refusal(pod_sets: list[PodSet]) -> Refusal | None:
    if not pod_sets:
        return Refusal("no_pod_sets", "no pod sets: nothing to admit")
    names: set[str] = set()
    for pod_set in pod_sets:
        where = f"pod set {show(pod_set.name)}"
        if not pod_set.name or pod_set.name in names:
            return Refusal("invalid_pod_set", f"{where}: pod set names must be unique, not empty")
        names.add(pod_set.name)
        if pod_set.count < 1:
            return Refusal("invalid_count", f"{where}: count {pod_set.count} is not positive")
        if pod_set.min_count is not None and not 0 <= pod_set.min_count <= pod_set.count:
            return Refusal(
                "invalid_count",
                f"{where}: min_count {pod_set.min_count} is not between 0 and {pod_set.count}",
            )
        bad = _quantities_refusal(pod_set.requests, f"{where} requests")
        if bad is not None:
            return bad
    return None


def _assignments_refusal(assignments: list[FlavorAssignment]) -> Refusal | None:
    for assignment in assignments:
        where = f"assignment of pod set {show(assignment.pod_set)}"
        if assignment.count < 0:
            return Refusal("invalid_count", f"{where}: count {assignment.count} is negative")
        bad = _quantities_refusal(assignment.usage, f"{where} usage")
        if bad is not None:
            return bad
        unassigned = sorted(
            r
            for r, amount in assignment.usage.items()
            if amount
            and (r not in assignment.flavors or name_problem(assignment.flavors[r]) is not None)
        )
        if unassigned:
            return Refusal("invalid_flavor", f"{where}: no valid flavor for {unassigned}")
    return None


def _quantities_refusal(quantities: dict[str, int], where: str) -> Refusal | None:
    for resource, amount in quantities.items():
        if (problem := name_problem(resource, "label-key")) is not None:
            return Refusal("invalid_resource", f"{where}: resource {show(resource)}: {problem}")
        if amount < 0:
            return Refusal("negative_quantity", f"{where}: {resource} {amount}m is negative")
        if amount > MAX_MILLI:
            return Refusal("quantity_too_large", f"{where}: {resource} {amount}m is too large")
    return None


def refused(event: AnyEvent) -> bool:
    """Apply :func:`refusal`: a refused fact is logged (one line: workload, queue, reason)
    and counted in ``berth_admission_refused_facts_total{reason}``."""
    found = refusal(event)
    if found is None:
        return False
    queue = (
        event.queue_name
        if isinstance(event, WorkloadSubmitted)
        else getattr(event, "cluster_queue", "")
    )
    metrics.REFUSED_FACTS.labels(reason=found.code).inc()
    log.warning(
        "fact_refused",
        workload=show(event.workload.key, 200).strip('"'),  # a forged name may be huge
        queue=show(queue, 200).strip('"'),
        reason=found.message,
        fact=type(event).__name__,
        event_id=event.id,
    )
    return True
