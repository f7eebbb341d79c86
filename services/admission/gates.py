"""What stands between a quota reservation and a running workload, for the admission service:
Kueue's admission checks (admission_checks.py) and waitForPodsReady (pods_ready.py), and the
backoff a workload they evicted waits before it queues again.

The service calls :meth:`Gates.apply` for every event it folds, :meth:`Gates.reserve` for
each admission it decides, :meth:`Gates.after_eviction` when an eviction is reported, and
:meth:`Gates.due` on every turn of its loop. Everything here is a fold of events (the
eviction carries its requeue time), so a replay and a standby agree with the leader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import msgspec

from services.admission.admission_checks import CheckGate, CheckStatus
from services.admission.deactivation import Deactivation, deactivating
from services.admission.pods_ready import LIMIT_REASON, PodsReadyClock
from shared.config import ConfigObject, wait_for_pods_ready_of
from shared.durations import kube_timestamp
from shared.events import (
    AdmissionCheckUpdated,
    AnyEvent,
    Event,
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPodsReady,
    WorkloadRef,
)
from shared.logging import get_logger

__all__ = ["Gates"]

log = get_logger("admission.gates")

# The events any gate folds; every other one passes by. By exact type (events are never
# subclassed): a set lookup is cheaper than isinstance misses against msgspec classes.
_FOLDED = frozenset(
    {
        WorkloadAdmitted,
        WorkloadPodsReady,
        AdmissionCheckUpdated,
        EvictionRequested,
        WorkloadEvicted,
        WorkloadFinished,
        WorkloadDeleted,
    }
)


@dataclass(slots=True)
class _Eviction:
    generation: int
    requeue_at: float | None
    reason: str


@dataclass
class Gates:
    FOLDED: ClassVar[frozenset[type]] = _FOLDED  # what apply reads; it passes any other by
    checks: CheckGate = field(default_factory=CheckGate)
    pods_ready: PodsReadyClock = field(default_factory=PodsReadyClock)
    evictions: dict[str, _Eviction] = field(default_factory=dict)  # uid -> the last requested
    # uid -> (workload, until, the generation evicted): the next admission is a new one
    held: dict[str, tuple[WorkloadRef, float, int]] = field(default_factory=dict)

    def set_config(self, objects: Iterable[ConfigObject]) -> None:
        objects = list(objects)
        self.checks.set_config(objects)
        self.pods_ready.configure(wait_for_pods_ready_of(objects))

    def apply(self, event: AnyEvent) -> float | None:
        """Fold one event into the checks, the pods-ready clock and the evictions; for a
        workload's first PodsReady of an admission, returns when it was admitted."""
        if type(event) not in _FOLDED:
            return None  # most of the stream (submissions, pending reasons): one check
        admitted_at = self.pods_ready.apply(event)
        ignored = self.checks.apply(event)
        if ignored is not None and type(event) is AdmissionCheckUpdated:
            log.warning(
                "check_answer_ignored",
                workload=event.workload.key,
                queue="",
                check=event.check,
                state=event.state,
                reason=ignored,
            )
        # By exact type: an isinstance miss against a msgspec class costs more (pods_ready.py)
        if type(event) is EvictionRequested:
            self.evictions[event.workload.uid] = _Eviction(
                event.generation,
                None if event.requeue_at is None else event.requeue_at.timestamp(),
                event.reason,
            )
        elif type(event) is WorkloadDeleted:
            self.evictions.pop(event.workload.uid, None)
            self.held.pop(event.workload.uid, None)
        return admitted_at

    def reserve(self, event: WorkloadAdmitted) -> WorkloadAdmitted:
        """An admission decided on quota, as a reservation that waits for the checks of its
        ClusterQueue that apply to its flavors; unchanged when none apply."""
        names = self.checks.checks_for(event.cluster_queue, event.assignments)
        if not names:
            return event
        return msgspec.structs.replace(
            event,
            id=f"reserved-{event.workload.uid}-{event.generation}",
            admission_checks=names,
            reserved_only=True,
        )

    def after_eviction(self, ref: WorkloadRef, generation: int) -> Literal["requeue", "hold"]:
        """What an eviction just reported means for the workload's place in the queue: the
        one requested for that generation holds it until its requeue time (a backoff), or
        it queues again at once (an inactive one leaves the queue: activation.py)."""
        requested = self.evictions.get(ref.uid)
        if requested is None or requested.generation != generation:
            return "requeue"
        if requested.requeue_at is not None:
            self.held[ref.uid] = (ref, requested.requeue_at, generation)
            return "hold"
        return "requeue"

    def unhold(self, uid: str) -> int:
        """Take a workload out of its backoff, deactivated or reactivated (Kueue clears
        ``requeueState.requeueAt``): the generation it was held with, 0 if it was not."""
        held = self.held.pop(uid, None)
        return 0 if held is None else held[2]

    def reactivated(self, uid: str) -> int:
        """A workload made active again: its requeue state starts over (Kueue clears
        ``requeueState``: no backoff, and the pods-ready requeue count is 0 again). The
        generation a backoff held it with, 0 if none."""
        self.pods_ready.reset_requeues(uid)
        return self.unhold(uid)

    def released(self, now: float) -> list[tuple[WorkloadRef, str, int]]:
        """Held workloads whose backoff is over: each with the reason it was evicted for and
        the generation it had (its next admission is numbered after it)."""
        out = []
        for uid, (ref, until, generation) in sorted(self.held.items()):
            if until <= now:
                del self.held[uid]
                eviction = self.evictions.get(uid)
                out.append((ref, eviction.reason if eviction else "", generation))
        return out

    def reserved_at(self, uid: str) -> float | None:
        """When the workload's reservation waiting for checks was made, if it has one."""
        waiting = self.checks.waiting.get(uid)
        return None if waiting is None else waiting.event.time.timestamp()

    def blocking(self) -> bool:
        """waitForPodsReady.blockAdmission: nothing is admitted while this is true."""
        return self.pods_ready.blocking()

    def due(self, now: float) -> list[Event]:
        """Decisions that are due: the checks' verdicts and the pods-ready timeouts; each is
        logged with its workload, queue and reason."""
        out: list[Event] = []
        for verdict, event in self.checks.decide(now):
            queue = getattr(event, "cluster_queue", "")
            log.info("admission_checks", workload=event.workload.key, queue=queue, reason=verdict)
            out.append(event)
        for eviction in self.pods_ready.due(now):
            if eviction.deactivated:  # the requeue limit: Kueue's RequeuingLimitExceeded
                why = eviction.message.removeprefix(Deactivation().message + " due to ")
                eviction = deactivating(eviction, Deactivation(LIMIT_REASON, why))
            log.info(
                "evicting",
                workload=eviction.workload.key,
                queue=eviction.cluster_queue,
                reason=eviction.reason,
                message=eviction.message,
            )
            out.append(eviction)
        return out

    def view(self, uid: str) -> dict[str, Any]:
        """What ``berth get workloads`` shows of a workload's checks and backoff."""
        fields: dict[str, Any] = {}
        states = self.checks.states.get(uid)
        if states:
            fields["admission_checks"] = [_shown(name, s) for name, s in sorted(states.items())]
        waiting = self.checks.waiting.get(uid)
        if waiting is not None and not waiting.decided:
            fields["reservation_generation"] = waiting.event.generation
        held = self.held.get(uid)
        if held is not None:
            fields["requeue_at"] = kube_timestamp(held[1])
        return fields


def _shown(name: str, status: CheckStatus) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "name": name,
        "state": status.state,
        "lastTransitionTime": kube_timestamp(status.time),
        "message": status.message,
    }
    if status.requeue_after_seconds is not None:
        shown["requeueAfterSeconds"] = status.requeue_after_seconds
    return shown
