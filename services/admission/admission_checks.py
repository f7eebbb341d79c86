"""Kueue's admission checks in admission: which checks a reservation must pass, what their
answers decide, and which ClusterQueues they make inactive (docs/admission-checks.md).

A workload that reserves quota in a ClusterQueue with checks is published as a reservation
only (``WorkloadAdmitted.reserved_only``: quota held, the watcher does not start it). The
checks' answers arrive as ``AdmissionCheckUpdated`` events; :func:`verdict` turns the states
into one decision, made once per reservation by :meth:`CheckGate.decide`:

- every check Ready: the same generation is published as admitted, and the watcher starts it;
- a check Retry: evicted with reason ``AdmissionCheck``, quota released, requeued after the
  answer's ``requeueAfterSeconds`` or Kueue's backoff (:func:`retry_delay`);
- a check Rejected: evicted and deactivated (``DeactivatedDueToAdmissionCheck``, the one
  deactivation: deactivation.py), not queued again until it is resumed.

Every input is an event, so a replay rebuilds the same states; decisions carry deterministic
ids, so a decision re-published after a failover is dropped by the stream.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from services.admission.deactivation import Deactivation
from services.admission.evictions import deactivation as deactivate
from services.admission.evictions import eviction as evict
from services.admission.pods_ready import backoff_seconds
from shared.admission_checks import CheckState, RequeuingStrategy, is_active
from shared.config import AdmissionCheck, ClusterQueue, ConfigObject, Configuration
from shared.events import (
    AdmissionCheckUpdated,
    AnyEvent,
    Event,
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
)

__all__ = [
    "REASON",
    "CheckGate",
    "CheckStatus",
    "applicable_checks",
    "check_problem",
    "retry_delay",
    "verdict",
]

REASON = "AdmissionCheck"  # Kueue's WorkloadEvictedByAdmissionCheck
# What CheckGate.apply folds (events are never subclassed: exact types).
_FOLDED = frozenset(
    {
        WorkloadAdmitted,
        AdmissionCheckUpdated,
        EvictionRequested,
        WorkloadEvicted,
        WorkloadFinished,
        WorkloadDeleted,
    }
)
Verdict = Literal["Ready", "Retry", "Rejected", "Waiting"]
# (check name, flavors it applies to; empty: every flavor)
Rule = tuple[str, frozenset[str]]


def verdict(states: Iterable[CheckState]) -> Verdict:
    """One decision from a reservation's check states, as Kueue's workload controller makes
    it: a Rejected check deactivates whatever the others say; else a Retry check evicts;
    the workload is admitted only when every check is Ready; otherwise it keeps waiting."""
    found = set(states)
    if "Rejected" in found:
        return "Rejected"
    if "Retry" in found:
        return "Retry"
    if found <= {"Ready"}:
        return "Ready"
    return "Waiting"


def applicable_checks(rules: Iterable[Rule], assignments: Iterable[FlavorAssignment]) -> list[str]:
    """The checks a reservation must pass (Kueue's AdmissionChecksForWorkload): a rule with
    ``onFlavors`` applies only if one of the flavors the workload was assigned is listed;
    a rule without applies always. Sorted by name, as Kueue keeps them."""
    flavors = {flavor for a in assignments for flavor in a.flavors.values()}
    return sorted({name for name, on in rules if not on or on & flavors})


def check_problem(
    rules: Iterable[Rule], checks: dict[str, AdmissionCheck]
) -> tuple[str, str] | None:
    """Why a ClusterQueue is inactive for its checks (Kueue's Active=False reason and
    message), or None: a check with no AdmissionCheck object (AdmissionCheckNotFound) or an
    inactive one (AdmissionCheckInactive) would hold every reservation for good."""
    names = sorted({name for name, _ in rules})
    missing = [name for name in names if name not in checks]
    if missing:
        return "AdmissionCheckNotFound", f"references missing AdmissionCheck(s): {missing}"
    inactive = [name for name in names if not is_active(checks[name].status)]
    if inactive:
        return "AdmissionCheckInactive", f"references inactive AdmissionCheck(s): {inactive}"
    return None


def retry_delay(
    *, requeue_after_seconds: int | None, retries: int, strategy: RequeuingStrategy, draw: float
) -> float:
    """How long a workload evicted by a Retry check waits before it queues again: the
    answer's ``requeueAfterSeconds`` (KEP-3258) when it gave one, else Kueue's backoff for
    the ``retries``-th retry of that check (base * 2^(n-1), capped, jittered), with the
    base and cap of ``waitForPodsReady.requeuingStrategy``."""
    if requeue_after_seconds is not None:
        return float(max(requeue_after_seconds, 0))
    return backoff_seconds(
        retries,
        base=strategy.backoff_base_seconds,
        cap=strategy.backoff_max_seconds,
        draw=draw,
    )


@dataclass(slots=True)
class CheckStatus:
    """One check's state for a workload, as Kueue's ``status.admissionChecks[]`` shows it."""

    state: CheckState
    message: str
    time: datetime
    requeue_after_seconds: int | None = None


@dataclass(slots=True)
class _Reservation:
    event: WorkloadAdmitted
    decided: bool = False  # admitted, or an eviction for it decided or seen


@dataclass
class CheckGate:
    """Reservations waiting for their checks, the checks' states, and the rules per queue."""

    checks: dict[str, AdmissionCheck] = field(default_factory=dict)
    rules: dict[str, list[Rule]] = field(default_factory=dict)  # cluster queue -> its checks
    strategy: RequeuingStrategy = field(default_factory=RequeuingStrategy)
    waiting: dict[str, _Reservation] = field(default_factory=dict)  # uid -> reservation
    states: dict[str, dict[str, CheckStatus]] = field(default_factory=dict)  # uid -> shown
    retries: dict[str, dict[str, int]] = field(default_factory=dict)  # uid -> check -> n
    random: random.Random = field(default_factory=random.Random)

    def set_config(self, objects: Iterable[ConfigObject]) -> None:
        self.checks = {}
        self.rules = {}
        self.strategy = RequeuingStrategy()
        for obj in objects:
            if isinstance(obj, AdmissionCheck):
                self.checks[obj.metadata.name] = obj
            elif isinstance(obj, ClusterQueue):
                spec = obj.spec
                strategy = spec.admission_checks_strategy
                rules = [(name, frozenset[str]()) for name in spec.admission_checks]
                if strategy is not None:
                    rules += [(r.name, frozenset(r.on_flavors)) for r in strategy.admission_checks]
                if rules:
                    self.rules[obj.metadata.name] = rules
            elif isinstance(obj, Configuration) and obj.spec.wait_for_pods_ready is not None:
                self.strategy = obj.spec.wait_for_pods_ready.requeuing_strategy
        self._sync()

    def _sync(self) -> None:
        """Kueue's reconcileSyncAdmissionChecks: the checks of a reservation still waiting
        follow its ClusterQueue's: one added starts Pending, one removed no longer counts
        (with none left, the reservation is admitted)."""
        for uid, reservation in self.waiting.items():
            if reservation.decided:
                continue
            event = reservation.event
            wanted = self.checks_for(event.cluster_queue, event.assignments)
            states = self.states.setdefault(uid, {})
            for name in [name for name in states if name not in wanted]:
                del states[name]
            for name in wanted:
                states.setdefault(name, CheckStatus("Pending", "", datetime.now(UTC)))

    def checks_for(self, cluster_queue: str, assignments: Iterable[FlavorAssignment]) -> list[str]:
        rules = self.rules.get(cluster_queue)
        if not rules:  # most ClusterQueues have no checks: no flavor set to build
            return []
        return applicable_checks(rules, assignments)

    def problem(self, cluster_queue: str) -> tuple[str, str] | None:
        return check_problem(self.rules.get(cluster_queue, ()), self.checks)

    # --- events ---------------------------------------------------------------------------

    def apply(self, event: AnyEvent) -> str | None:
        """Fold one event; idempotent. For an answer it does not take, returns why."""
        if type(event) not in _FOLDED:  # one set lookup for every other event
            return None
        uid = event.workload.uid
        current = self.waiting.get(uid)
        # By exact type: an isinstance miss against a msgspec class costs more (pods_ready.py).
        if type(event) is WorkloadAdmitted:
            if event.reserved_only:
                if current is None or current.event.generation < event.generation:
                    self.waiting[uid] = _Reservation(event)
                    self.states[uid] = {
                        name: CheckStatus("Pending", "", event.time)
                        for name in event.admission_checks
                    }
            elif current is not None and current.event.generation <= event.generation:
                del self.waiting[uid]  # admitted: every check was Ready
        elif type(event) is AdmissionCheckUpdated:
            return self._answer(event)
        elif type(event) is EvictionRequested:
            if current is not None and current.event.generation == event.generation:
                current.decided = True
                if event.reason == REASON:  # a Retry: its checks' retries count
                    counts = self.retries.setdefault(uid, {})
                    for name, status in self.states.get(uid, {}).items():
                        if status.state == "Retry":
                            counts[name] = counts.get(name, 0) + 1
        elif type(event) is WorkloadEvicted or type(event) is WorkloadFinished:
            if current is not None and current.event.generation == event.generation:
                del self.waiting[uid]
        elif type(event) is WorkloadDeleted:
            self.waiting.pop(uid, None)
            self.states.pop(uid, None)
            self.retries.pop(uid, None)
        return None

    def _answer(self, event: AdmissionCheckUpdated) -> str | None:
        uid = event.workload.uid
        current = self.waiting.get(uid)
        if current is None:
            return "the workload holds no reservation waiting for admission checks"
        generation = current.event.generation
        if event.generation not in (0, generation):
            return f"it answers reservation {event.generation}, the current one is {generation}"
        checks = sorted(self.states.get(uid, {}))
        if event.check not in checks:
            return f"the reservation's checks are {checks}"
        if current.decided:
            return "the reservation's checks are decided already"
        self.states[uid][event.check] = CheckStatus(
            event.state, event.message, event.time, event.requeue_after_seconds
        )
        return None

    # --- decisions ------------------------------------------------------------------------

    def decide(self, now: float) -> list[tuple[Verdict, Event]]:
        """One decision per reservation whose checks have a verdict; each made once."""
        out: list[tuple[Verdict, Event]] = []
        for uid, reservation in sorted(self.waiting.items()):
            if reservation.decided:
                continue
            states = self.states.get(uid, {})
            found = verdict(status.state for status in states.values())
            if found == "Waiting":
                continue
            reservation.decided = True
            reserved = reservation.event
            if found == "Ready":
                out.append((found, _admitted(reserved)))
                continue
            named = sorted(n for n, s in states.items() if s.state == found)
            detail = "; ".join(
                f'"{n}" ({states[n].message})' if states[n].message else f'"{n}"' for n in named
            )
            noun = "AdmissionChecks" if len(named) > 1 else "AdmissionCheck"
            what = f"{noun} in {found} state: {detail}"
            if found == "Rejected":
                event = deactivate("checkrejected", *_run(reserved), Deactivation(REASON, what))
            else:
                counts = self.retries.get(uid, {})
                wait = max(
                    retry_delay(
                        requeue_after_seconds=states[n].requeue_after_seconds,
                        retries=counts.get(n, 0) + 1,
                        strategy=self.strategy,
                        draw=self.random.random(),
                    )
                    for n in named
                )
                event = evict(
                    "checkretry",
                    *_run(reserved),
                    REASON,
                    message=f"Evicted due to {what}; requeued after {wait:.0f}s",
                    requeue_at=datetime.fromtimestamp(now + wait, UTC),
                )
            out.append((found, event))
        return out


def _run(reserved: WorkloadAdmitted) -> tuple[WorkloadRef, str, int]:
    """The workload, ClusterQueue and generation of a reservation."""
    return reserved.workload, reserved.cluster_queue, reserved.generation


def _admitted(reserved: WorkloadAdmitted) -> WorkloadAdmitted:
    """The reservation's admission: the same generation and flavors, now to be started."""
    return WorkloadAdmitted(
        id=f"admitted-{reserved.workload.uid}-{reserved.generation}",
        source="admission",
        workload=reserved.workload,
        cluster_queue=reserved.cluster_queue,
        local_queue=reserved.local_queue,
        priority=reserved.priority,
        assignments=reserved.assignments,
        generation=reserved.generation,
        admission_checks=reserved.admission_checks,
    )
