"""The one deactivation (services/admission/deactivation.py): a workload's active state after
each stop, resume or eviction, whoever deactivated it, with the reason per case."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.admission.admission_checks import REASON as CHECK_REASON
from services.admission.deactivation import Deactivation, active_after, deactivating
from services.admission.exec_time import MESSAGE as EXEC_MESSAGE
from services.admission.exec_time import REASON as EXEC_REASON
from services.admission.pods_ready import LIMIT_REASON
from shared.events import EvictionRequested, SetWorkloadActive, WorkloadRef

REF = WorkloadRef("default", "a", "uid-a")
USER = Deactivation()
EXEC = Deactivation(EXEC_REASON, EXEC_MESSAGE)
CHECK = Deactivation(CHECK_REASON, 'AdmissionCheck in Rejected state: "budget" (no budget)')
LIMIT = Deactivation(LIMIT_REASON, "exceeding the maximum number of re-queuing retries (1)")


def stop() -> SetWorkloadActive:
    return SetWorkloadActive(source="cli", workload=REF, active=False)


def resume() -> SetWorkloadActive:
    return SetWorkloadActive(source="cli", workload=REF, active=True)


def eviction(
    reason: str,
    *,
    detail: str = "",
    requeue_at: datetime | None = None,
    deactivated: bool = False,
) -> EvictionRequested:
    return EvictionRequested(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        generation=1,
        reason=reason,
        detail=detail,
        requeue_at=requeue_at,
        deactivated=deactivated,
    )


def deactivated_by(cause: Deactivation) -> EvictionRequested:
    return deactivating(eviction(cause.cause or "Deactivated"), cause)


# (why, the state before, the event, the Evicted reason after: None if active)
CASES: list[tuple[str, Deactivation | None, SetWorkloadActive | EvictionRequested, str | None]] = [
    ("berth stop workload deactivates an active workload", None, stop(), "Deactivated"),
    ("berth resume workload reactivates a stopped one", USER, resume(), None),
    (
        "resume reactivates one its maximum execution time deactivated",
        EXEC,
        resume(),
        None,
    ),
    ("resume reactivates one a Rejected check deactivated", CHECK, resume(), None),
    ("resume reactivates one the pods-ready requeue limit deactivated", LIMIT, resume(), None),
    ("resuming an active workload leaves it active", None, resume(), None),
    (
        "a stop keeps the reason it was first deactivated for",
        EXEC,
        stop(),
        "DeactivatedDueToMaximumExecutionTimeExceeded",
    ),
    (
        "its maximum execution time exceeded deactivates it, Kueue's reason",
        None,
        deactivated_by(EXEC),
        "DeactivatedDueToMaximumExecutionTimeExceeded",
    ),
    (
        "a Rejected admission check deactivates it, Kueue's reason",
        None,
        deactivated_by(CHECK),
        "DeactivatedDueToAdmissionCheck",
    ),
    (
        "the pods-ready requeue limit deactivates it, Kueue's reason",
        None,
        deactivated_by(LIMIT),
        "DeactivatedDueToRequeuingLimitExceeded",
    ),
    (
        "a second deactivation keeps the first reason (Kueue sets it on active ones only)",
        CHECK,
        deactivated_by(EXEC),
        "DeactivatedDueToAdmissionCheck",
    ),
    (
        "a user's stop carried out (reason Deactivated, no cause) decides nothing itself: a"
        " resume that landed before it wins",
        None,
        deactivated_by(USER),
        None,
    ),
    (
        "an older stream: the requeue limit's eviction named the cause as its reason",
        None,
        eviction(LIMIT_REASON, deactivated=True),
        "DeactivatedDueToRequeuingLimitExceeded",
    ),
    (
        "an older stream: the maximum execution time's eviction did not say it deactivated",
        None,
        eviction(EXEC_REASON),
        "DeactivatedDueToMaximumExecutionTimeExceeded",
    ),
    (
        "an older stream: a Rejected check was reason Deactivated, its cause in detail",
        None,
        eviction("Deactivated", detail=CHECK_REASON, deactivated=True),
        "DeactivatedDueToAdmissionCheck",
    ),
    ("a preemption does not deactivate", None, eviction("Preempted"), None),
    (
        "a Retry check's eviction requeues after a backoff: still active",
        None,
        eviction(CHECK_REASON, requeue_at=datetime(2026, 11, 25, tzinfo=UTC)),
        None,
    ),
    ("a pods-ready timeout with a requeue: still active", None, eviction("PodsReadyTimeout"), None),
    (
        "a preemption of an inactive workload leaves it inactive",
        USER,
        eviction("Preempted"),
        "Deactivated",
    ),
]


@pytest.mark.parametrize(("why", "before", "event", "reason"), CASES, ids=[c[0] for c in CASES])
def test_active_after(
    why: str,
    before: Deactivation | None,
    event: SetWorkloadActive | EvictionRequested,
    reason: str | None,
) -> None:
    """The rule: see the id of each case."""
    after = active_after(before, event)
    assert (None if after is None else after.reason) == reason, why


# (why, the deactivation, the eviction's message)
MESSAGES = [
    ("a user's stop: Kueue's plain message", USER, "The workload is deactivated"),
    (
        "a cause: Kueue's message with it",
        EXEC,
        "The workload is deactivated due to exceeding the maximum execution time",
    ),
]


@pytest.mark.parametrize(("why", "cause", "message"), MESSAGES, ids=[m[0] for m in MESSAGES])
def test_deactivating_eviction(why: str, cause: Deactivation, message: str) -> None:
    """A deactivating eviction carries Kueue's reason and message, its cause in detail, no
    requeue time, and reads back as the same deactivation."""
    event = deactivating(eviction("x", requeue_at=datetime(2026, 11, 25, tzinfo=UTC)), cause)
    assert event.message == message, why
    assert (event.reason, event.detail, event.deactivated) == (cause.reason, cause.cause, True)
    assert event.requeue_at is None
    if cause.cause:
        assert active_after(None, event) == cause, "the fold reads back what was decided"
