"""One deactivation: a workload is active or inactive (Kueue's ``spec.active``), and an inactive
one carries the reason it was deactivated for, whoever deactivated it.

Who deactivates, and Kueue's Evicted reason for it (``Deactivated`` plus Kueue's underlying
cause, the ``DeactivationTarget`` reason, as ``DeactivatedDueTo<cause>``):

===========================================  ===========================================
a user: ``berth stop workload``, kueuectl's   ``Deactivated``
``stop workload`` (``spec.active: false``)
``maximumExecutionTimeSeconds`` exceeded      ``DeactivatedDueToMaximumExecutionTimeExceeded``
(exec_time.py)
an admission check Rejected                   ``DeactivatedDueToAdmissionCheck``
(admission_checks.py)
waitForPodsReady's requeue limit              ``DeactivatedDueToRequeuingLimitExceeded``
(pods_ready.py)
===========================================  ===========================================

Every Kueue-made deactivation is an :class:`~shared.events.EvictionRequested` built by
:func:`deactivating` (``deactivated`` set, the cause in ``detail``); a user's is a
:class:`~shared.events.SetWorkloadActive`. :func:`active_after` is the one rule that folds
them, and :class:`services.admission.activation.Activity` acts on its transitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from shared.events import EvictionRequested, SetWorkloadActive

__all__ = [
    "DEACTIVATED",
    "EXEC_CAUSE",
    "USER",
    "Deactivation",
    "active_after",
    "cause_of",
    "deactivating",
]

DEACTIVATED = "Deactivated"  # Kueue's WorkloadDeactivated
USER = ""  # the cause of a user's stop: none, plain ``Deactivated``
EXEC_CAUSE = "MaximumExecutionTimeExceeded"
MESSAGE = "The workload is deactivated"
_DUE_TO = f"{MESSAGE} due to "


@dataclass(frozen=True, slots=True)
class Deactivation:
    """Why an inactive workload is inactive: Kueue's cause ("" for a user's stop) and what
    follows "due to" in its message ("" for a user's stop)."""

    cause: str = USER
    why: str = ""

    @property
    def reason(self) -> str:
        """Kueue's Evicted reason: ``Deactivated``, or ``DeactivatedDueTo<cause>``."""
        return f"{DEACTIVATED}DueTo{self.cause}" if self.cause else DEACTIVATED

    @property
    def message(self) -> str:
        return f"{_DUE_TO}{self.why}" if self.why else MESSAGE


def deactivating(eviction: EvictionRequested, deactivation: Deactivation) -> EvictionRequested:
    """``eviction`` as the deactivation it is: Kueue's reason and message, the cause in
    ``detail``, ``deactivated`` set and no requeue time (an inactive workload is queued again
    only when it is active again)."""
    return msgspec.structs.replace(
        eviction,
        reason=deactivation.reason,
        detail=deactivation.cause,
        message=deactivation.message,
        requeue_at=None,
        deactivated=True,
    )


def cause_of(event: EvictionRequested) -> Deactivation | None:
    """The deactivation a Kueue-made eviction carries, or None for any other eviction
    (a preemption, a backoff's requeue, a drain) and for a user's stop being carried out,
    which its ``SetWorkloadActive`` decided already.

    Streams written before the one deactivation are read too: a ``deactivated`` eviction
    whose reason is the cause itself (``RequeuingLimitExceeded``), or the old
    ``MaximumExecutionTimeExceeded`` eviction, which did not say it deactivated.
    """
    why = event.message.removeprefix(_DUE_TO) if event.message.startswith(_DUE_TO) else ""
    if event.reason.startswith(DEACTIVATED):
        cause = event.detail or event.reason.removeprefix(DEACTIVATED).removeprefix("DueTo")
        return Deactivation(cause, why) if cause else None
    if event.deactivated or event.reason == EXEC_CAUSE:
        return Deactivation(event.reason, why)
    return None


def active_after(
    current: Deactivation | None, event: SetWorkloadActive | EvictionRequested
) -> Deactivation | None:
    """A workload's active state after ``event`` (None: active), from ``current``: the rule.

    - ``SetWorkloadActive(active=True)`` (``berth resume workload``, or ``spec.active: true``
      on the cluster's Workload) makes it active, whatever it was deactivated for; the
      caller then resets its requeue state (Kueue clears ``requeueState``) and queues it.
    - ``SetWorkloadActive(active=False)`` makes an active workload inactive, reason
      ``Deactivated``.
    - A Kueue-made deactivating eviction (:func:`cause_of`) makes an active workload
      inactive with its cause.
    - An inactive workload keeps the reason it was first deactivated for (Kueue sets its
      ``DeactivationTarget`` only on an active workload); any other event changes nothing.
    """
    if isinstance(event, SetWorkloadActive):
        if event.active:
            return None
        return current or Deactivation()
    if current is not None:
        return current
    return cause_of(event)
