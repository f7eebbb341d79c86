"""The fence: which events a deposed leader published too late, and so count for nothing.

Every role (watcher, admission, preemption, recovery) acts under a lease (shared/lease.py);
each new holder gets a higher term, publishes a ``LeaderElected`` marker with it on
``berth.lease.<role>``, and the Bus stamps its term on everything it publishes. Readers apply
:class:`Fence` to what they read, in stream order, so every service agrees on which decisions
stand: those of the role's current leader, and those its predecessors published before the
marker that deposed them.

The Bus applies it to every consumer in its decode path (:meth:`Fence.screen`), so no handler ever
sees a void event or a marker.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from prometheus_client import Counter

from shared.events import SUBJECT_ROOT, AnyEvent, LeaderElected
from shared.logging import get_logger

__all__ = [
    "FENCED",
    "LEASED_ROLES",
    "LEASE_SUBJECTS",
    "MARKER_PREFIX",
    "Fence",
    "Verdict",
    "fenced_log",
]

log = get_logger("fence")

LEASED_ROLES = frozenset({"watcher", "admission", "preemption", "recovery"})
MARKER_PREFIX = f"{SUBJECT_ROOT}.lease."
LEASE_SUBJECTS = f"{MARKER_PREFIX}>"  # the markers, one subject per role

FENCED = Counter(
    "berth_fenced_events_total",
    "Events dropped because a deposed leader published them after its successor's marker",
    ["source"],
)


class Verdict(enum.Enum):
    KEEP = "keep"  # a live event: hand it to the handlers
    MARKER = "marker"  # a LeaderElected: it moved (or confirmed) the fence; no handler wants it
    VOID = "void"  # a deposed leader's late decision: drop it


class Fence:
    """The rule, applied to events in stream order:

    - per role, the *current term* is the highest ``term`` among the ``LeaderElected``
      markers of that role seen so far (0 before any);
    - an event whose ``source`` is a leased role (watcher, admission, preemption, recovery)
      and whose ``term`` is lower than that role's current term is **void**: a replica that
      lost its lease published it after its successor's marker, so nobody acts on it;
    - everything else stands: events of the current term or a later one (a new leader's
      events follow its marker, but a reader must not depend on it), events from sources
      that hold no lease (the CLI, tests, external tools) and events stored before the marker
      (the old leader's valid decisions, which the new leader folded before it acted).

    Why stream order and not time: the stream is the one order every reader sees, so the
    watcher, admission, preemption and recovery reach the same verdict on the same event.

    A reader that starts mid-stream (a durable consumer resuming after its ack floor) starts
    from the markers stored before its resume point (``shared.bus.fences.fence_before``), the
    same state it would have reached by reading from the start. Pure: no I/O.
    """

    def __init__(self, terms: Mapping[str, int] | None = None) -> None:
        self._terms: dict[str, int] = dict(terms or {})

    def term(self, role: str) -> int:
        """The role's current term (0 before any marker)."""
        return self._terms.get(role, 0)

    def judge(self, event: AnyEvent) -> Verdict:
        """The verdict on the next event in stream order (a marker moves the fence)."""
        if isinstance(event, LeaderElected):
            if event.term > self._terms.get(event.role, 0):
                self._terms[event.role] = event.term
            return Verdict.MARKER
        if event.source in LEASED_ROLES and event.term < self._terms.get(event.source, 0):
            return Verdict.VOID
        return Verdict.KEEP

    def screen(self, events: list[AnyEvent]) -> list[AnyEvent]:
        """The events of a batch that stand, by :meth:`judge`'s rule; a void one is logged
        (``fenced``) and counted. An event other than a marker at or above its source's
        current term stands whatever its source, so it is kept here without a call to
        :meth:`judge`; the rest is judged in full."""
        kept: list[AnyEvent] = []
        terms = self._terms
        for event in events:
            if event.term >= terms.get(event.source, 0) and type(event) is not LeaderElected:
                kept.append(event)
                continue
            verdict = self.judge(event)
            if verdict is Verdict.KEEP:
                kept.append(event)
            elif verdict is Verdict.VOID:
                FENCED.labels(source=event.source).inc()
                log.warning(
                    "fenced",
                    workload=event.workload.key,
                    kind=type(event).__name__,
                    event_id=event.id,
                    source=event.source,
                    term=event.term,
                    current_term=self.term(event.source),
                )
        return kept


def fenced_log(events: Iterable[AnyEvent]) -> list[AnyEvent]:
    """A whole event log (in stream order) as the services saw it: markers and void events
    left out, silently (for audits of a run: the tests, the benchmarks)."""
    fence = Fence()
    return [event for event in events if fence.judge(event) is Verdict.KEEP]
