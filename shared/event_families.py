"""An event's subject family from its type alone (``cq.*.admitted``), no subject built: what
a batch's events are checked against (shared/bus/batches.py) and counted by."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from shared.events import SUBJECT_PARTS, Event, WorkloadAdmitted, only_reserves

__all__ = ["all_of_family", "subject_family_of"]

# event type -> the family of its subjects (:func:`subject_family_of`).
_FAMILIES: dict[type[Event], str] = {
    kind: f"cq.*.{verb}" if family == "cq" else f"{family}.{verb or '*'}"
    for kind, (family, verb) in SUBJECT_PARTS.items()
}


def subject_family_of(event: Event) -> str:
    """``shared.subjects.subject_family`` of ``shared.events.subject_for``
    (``cq.*.admitted``) from the type alone, no subject built (``cq.*.reserved`` for an
    admission that :func:`shared.events.only_reserves`)."""
    if only_reserves(event):
        return "cq.*.reserved"
    return _FAMILIES[type(event)]


# subject family -> the one event type whose events are of it (both cq.*.admitted and
# cq.*.reserved: WorkloadAdmitted, told apart by reserved_only)
_KIND_OF_FAMILY: dict[str, type[Event]] = {
    **{family: kind for kind, family in _FAMILIES.items()},
    "cq.*.reserved": WorkloadAdmitted,
}
_RESERVED_ONLY = attrgetter("reserved_only")


def all_of_family(events: Sequence[Event], family: str) -> bool:
    """Whether :func:`subject_family_of` is ``family`` for every event of ``events`` (and
    for none, vacuously): judged for the whole list at once, by the set of their types
    (each family is one type's) and, for an admission's two families, whether any or all
    only reserve. What a consumer checks every batch it reads with (shared/bus/batches.py
    ``expand``), without a Python call per event."""
    kind = _KIND_OF_FAMILY.get(family)
    if kind is None or not events:
        return not events
    if set(map(type, events)) != {kind}:
        return False
    if kind is WorkloadAdmitted:
        if family == "cq.*.reserved":
            return all(map(_RESERVED_ONLY, events))
        return not any(map(_RESERVED_ONLY, events))
    return True
