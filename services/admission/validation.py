"""Admission trusts no fact blindly: what may be folded into the quota books.

The stream is shared; a fact can come from a watcher with a bug, an old version, or a tool
that publishes by hand. A fact that would put a negative, zero or malformed quantity in the
books is refused here, with one log line and a count, and never reaches the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.admission import metrics
from services.admission.interning import kept_once
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.logging import get_logger
from shared.names import name_problem, show, valid_name_and_uid
from shared.quantities import MAX_MILLI

__all__ = ["CHECKED", "Refusal", "refusal", "refused"]

log = get_logger("admission.validation")


CHECKED = frozenset({WorkloadSubmitted, WorkloadAdmitted})  # the facts with quantities


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # the metric's reason label: few values, stable
    message: str  # for the log: names the field and the value


def refusal(event: AnyEvent, known: WorkloadRef | None = None) -> Refusal | None:
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

    ``known``: the identity of a workload whose submission passed these checks (the caller's
    record of it). A fact whose workload equals it has the same, valid, names: they are not
    judged again (the queue and the quantities still are).
    """
    # By exact type (events are never subclassed): isinstance misses against msgspec classes
    # cost more than a set lookup.
    if type(event) not in CHECKED:
        return None
    ref = event.workload
    if (known is None or ref != known) and not _valid_ref(ref):
        for value, rule in ((ref.namespace, "namespace"), (ref.name, "name"), (ref.uid, "uid")):
            # Its own name and uid are new with each workload: not remembered (_problem).
            if (problem := _problem(value, rule, remember=rule == "namespace")) is not None:
                return Refusal("invalid_name", f"{rule} {show(value)}: {problem}")
    if type(event) is WorkloadSubmitted:
        queue = event.queue_name
        if queue and (problem := _problem(queue)) is not None:
            return Refusal("invalid_queue", f"queue {show(queue)}: {problem}")
        return _pod_sets_refusal(event.pod_sets)
    if type(event) is WorkloadAdmitted:
        if (problem := _problem(event.cluster_queue)) is not None:
            queue = event.cluster_queue
            return Refusal("invalid_queue", f"ClusterQueue {show(queue)}: {problem}")
        return _assignments_refusal(event.assignments)
    return None  # (CHECKED holds only the two above)


# Names found valid, per rule: the few that every fact repeats (namespaces; queue, flavor and
# resource names) are judged once, then found here (kept as kept_once keeps its tables).
_VALID: dict[str, dict[str, bool]] = {"namespace": {}, "name": {}, "label-key": {}}
_VALID_NAMESPACES = _VALID["namespace"]
_VALID_RESOURCES = _VALID["label-key"]


def _valid_ref(ref: WorkloadRef) -> bool:
    """Whether a workload's namespace (remembered valid), name and uid are all shown valid
    at once (:func:`shared.names.valid_name_and_uid`); False: each is judged, as before,
    for the problem (or found valid: a namespace not remembered yet)."""
    namespace = ref.namespace
    return (
        type(namespace) is str
        and namespace in _VALID_NAMESPACES
        and valid_name_and_uid(ref.name, ref.uid)
    )


def _problem(value: str, rule: str = "name", *, remember: bool = True) -> str | None:
    """:func:`shared.names.name_problem`, with the valid names it remembers (``remember``:
    not a workload's own name or uid, each new) answered from :data:`_VALID` without being
    judged again. A name with a problem is judged every time; so is anything not a str."""
    valid = _VALID.get(rule) if remember and type(value) is str else None
    if valid is not None and value in valid:
        return None
    problem = name_problem(value, rule, remember=remember)  # new ones: not in its memo either
    if problem is None and valid is not None:
        kept_once(valid, value, lambda: True)
    return problem


def _pod_sets_refusal(pod_sets: list[PodSet]) -> Refusal | None:
    if not pod_sets:
        return Refusal("no_pod_sets", "no pod sets: nothing to admit")
    names: set[str] = set()
    for pod_set in pod_sets:
        name, count, min_count = pod_set.name, pod_set.count, pod_set.min_count
        if not name or name in names:
            return Refusal(
                "invalid_pod_set", f"{_pod_set(name)}: pod set names must be unique, not empty"
            )
        names.add(name)
        if count < 1:
            return Refusal("invalid_count", f"{_pod_set(name)}: count {count} is not positive")
        if min_count is not None and not 0 <= min_count <= count:
            return Refusal(
                "invalid_count",
                f"{_pod_set(name)}: min_count {min_count} is not between 0 and {count}",
            )
        bad = _quantities_refusal(pod_set.requests)
        if bad is not None:
            return Refusal(bad[0], f"{_pod_set(name)} requests: {bad[1]}")
    return None


def _pod_set(name: str) -> str:
    return f"pod set {show(name)}"


def _unassigned(resource: str, amount: int, flavors: Mapping[str, str]) -> bool:
    """A resource used without a valid flavor assigned to it."""
    if not amount:
        return False
    flavor = flavors.get(resource)
    return flavor is None or _problem(flavor) is not None


# Assignments found valid, by identity; each value is its key's object, so no other can take
# its id while it is kept. The leader's own admissions are folded after they are published
# (service._publish) and share one assignment per shape (flavors.py keeps them once): each
# is judged once, not per admission. Assignments are frozen, their dicts never written.
_VALID_ASSIGNMENTS: dict[int, FlavorAssignment] = {}


def _assignments_refusal(assignments: list[FlavorAssignment]) -> Refusal | None:
    for assignment in assignments:
        if _VALID_ASSIGNMENTS.get(id(assignment)) is not assignment:  # else: judged valid
            found = _assignment_refusal(assignment)
            if found is not None:
                return found
    return None


def _assignment_refusal(assignment: FlavorAssignment) -> Refusal | None:
    """Why one assignment may not be folded (refusal's rule), or None; a valid one is
    remembered (:data:`_VALID_ASSIGNMENTS`)."""
    if assignment.count < 0:
        return Refusal(
            "invalid_count",
            f"{_assignment(assignment)}: count {assignment.count} is negative",
        )
    usage, flavors = assignment.usage, assignment.flavors
    bad = _quantities_refusal(usage)
    if bad is not None:
        return Refusal(bad[0], f"{_assignment(assignment)} usage: {bad[1]}")
    for resource, amount in usage.items():
        if _unassigned(resource, amount, flavors):
            unassigned = sorted(r for r, a in usage.items() if _unassigned(r, a, flavors))
            return Refusal(
                "invalid_flavor",
                f"{_assignment(assignment)}: no valid flavor for {unassigned}",
            )
    kept_once(_VALID_ASSIGNMENTS, id(assignment), lambda: assignment)
    return None


def _assignment(assignment: FlavorAssignment) -> str:
    return f"assignment of pod set {show(assignment.pod_set)}"


def _quantities_refusal(quantities: dict[str, int]) -> tuple[str, str] | None:
    """The refusal code and what is wrong, for the first bad resource name or amount."""
    if _valid_quantities(quantities):
        return None
    for resource, amount in quantities.items():
        if (problem := _problem(resource, "label-key")) is not None:
            return "invalid_resource", f"resource {show(resource)}: {problem}"
        if amount < 0:
            return "negative_quantity", f"{resource} {amount}m is negative"
        if amount > MAX_MILLI:
            return "quantity_too_large", f"{resource} {amount}m is too large"
    return None


def _valid_quantities(quantities: dict[str, int]) -> bool:
    """Whether every resource name is one remembered valid and every amount between 0 and
    :data:`MAX_MILLI` (no call per resource); False: each is judged, as before, for the
    first problem (or found valid: a name not remembered yet)."""
    valid = _VALID_RESOURCES
    for resource, amount in quantities.items():
        if resource not in valid or not 0 <= amount <= MAX_MILLI:
            return False
    return True


def refused(event: AnyEvent, known: WorkloadRef | None = None) -> bool:
    """Apply :func:`refusal`: a refused fact is logged (one line: workload, queue, reason)
    and counted in ``berth_admission_refused_facts_total{reason}``."""
    found = refusal(event, known)
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
