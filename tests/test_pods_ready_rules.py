"""waitForPodsReady's rules as functions (services/admission/pods_ready.py): Kueue's backoff,
the requeue limit, which clock runs and how long it has left, the recovery timeout in force,
and the time a requeued workload queues by."""

from __future__ import annotations

import pytest

from services.admission.pods_ready import (
    after_timeout,
    backoff_seconds,
    not_ready_timeout,
    queue_order_time,
    recovery_seconds,
)
from shared.admission_checks import WaitForPodsReady

BACKOFF: list[tuple[int, float, float, float, float, str]] = [
    (1, 60, 3600, 0.0, 60.0, "the first requeue waits the base (Kueue: 60s)"),
    (2, 60, 3600, 0.0, 120.0, "then twice that"),
    (3, 60, 3600, 0.0, 240.0, "base * 2^(n-1): 60, 120, 240 as Kueue's field notes say"),
    (7, 60, 3600, 0.0, 3600.0, "capped at backoffMaxSeconds (60*64 > 3600)"),
    (1, 60, 3600, 1.0, 60.006, "the jitter stretches by at most 0.0001"),
    (0, 60, 3600, 0.5, 0.0, "no requeue yet: no wait"),
    (200, 1, 0, 0.0, 2.0**62, "a cap of 0 is no cap, and a huge count does not overflow"),
]


@pytest.mark.parametrize(
    ("count", "base", "cap", "draw", "expected", "why"), BACKOFF, ids=[b[5] for b in BACKOFF]
)
def test_backoff_seconds(
    count: int, base: float, cap: float, draw: float, expected: float, why: str
) -> None:
    """Kueue's requeue backoff (KEP-1282)."""
    assert backoff_seconds(count, base=base, cap=cap, draw=draw) == pytest.approx(expected), why


LIMITS: list[tuple[int, int | None, str, str]] = [
    (0, None, "requeue", "no limit: requeued forever"),
    (5, None, "requeue", "no limit, many requeues"),
    (0, 1, "requeue", "the first timeout is within a limit of 1"),
    (1, 1, "deactivate", "the second would be the second requeue: over the limit"),
    (0, 0, "deactivate", "a limit of 0 deactivates at the first timeout"),
]


@pytest.mark.parametrize(
    ("requeues", "limit", "expected", "why"), LIMITS, ids=[x[3] for x in LIMITS]
)
def test_after_timeout(requeues: int, limit: int | None, expected: str, why: str) -> None:
    """backoffLimitCount, as Kueue's triggerDeactivation counts it."""
    assert after_timeout(requeues, limit) == expected, why


MINUTE = 60.0
NOW = 10_000.0
# Kueue's TestAdmittedNotReadyWorkload (pkg/controller/core/workload_controller_test.go),
# replayed: (case, admitted_at, ready, lost_at, timeout, recovery, expected).
NOT_READY: list[
    tuple[str, float | None, bool, float | None, float | None, float | None, object]
] = [
    ("workload without Admitted condition; not counting", None, False, None, 300.0, None, None),
    (
        "workload with Admitted=True, no PodsReady; counting",
        NOW - MINUTE,
        False,
        None,
        300.0,
        None,
        ("WaitForStart", 240.0),
    ),
    (
        "workload with Admitted=True, no PodsReady, but no timeout configured; not counting",
        NOW - MINUTE,
        False,
        None,
        None,
        None,
        None,
    ),
    (
        "workload with Admitted=True, no PodsReady; timeout exceeded",
        NOW - 7 * MINUTE,
        False,
        None,
        300.0,
        None,
        ("WaitForStart", 0.0),
    ),
    (
        "with reason WorkloadWaitForPodsReadyStart; workload with Admitted=True,"
        " PodsReady=False; counting since admitted.LastTransitionTime",
        NOW - MINUTE,
        False,
        None,
        300.0,
        300.0,
        ("WaitForStart", 240.0),
    ),
    (
        "workload with Admitted=True, PodsReady=False, Reason=WorkloadWaitForPodsReadyRecovery",
        NOW - MINUTE,
        False,
        NOW,
        300.0,
        3 * MINUTE,
        ("WaitForRecovery", 180.0),
    ),
    (
        "workload with Admitted=True, PodsReady=False, Reason=WorkloadWaitForPodsReadyRecovery,"
        " recoveryTimeout not configured",
        NOW - MINUTE,
        False,
        NOW,
        300.0,
        None,
        None,
    ),
    (
        "workload with Admitted=True, PodsReady=True; not counting",
        NOW - MINUTE,
        True,
        None,
        300.0,
        300.0,
        None,
    ),
    (
        "Berth: recovery counts from the loss of readiness, not from the admission",
        NOW - 60 * MINUTE,
        False,
        NOW - MINUTE,
        300.0,
        3 * MINUTE,
        ("WaitForRecovery", 120.0),
    ),
]


@pytest.mark.parametrize(
    ("case", "admitted_at", "ready", "lost_at", "timeout", "recovery", "expected"),
    NOT_READY,
    ids=[f"TestAdmittedNotReadyWorkload/{c[0]}" for c in NOT_READY],
)
def test_not_ready_timeout(
    case: str,
    admitted_at: float | None,
    ready: bool,
    lost_at: float | None,
    timeout: float | None,
    recovery: float | None,
    expected: object,
) -> None:
    """Kueue's admittedNotReadyWorkload: which clock runs, and how long it has left."""
    got = not_ready_timeout(
        admitted_at=admitted_at,
        ready=ready,
        lost_at=lost_at,
        timeout=timeout,
        recovery=recovery,
        now=NOW,
    )
    assert got == expected, case


RECOVERY: list[tuple[str | None, str, float | None, str]] = [
    (None, "5m", 300.0, "unset: the timeout (Kueue's default since #8493)"),
    ("3m", "5m", 180.0, "set: its own value"),
    ("0s", "5m", None, "0s turns recovery timeouts off, as in Kueue"),
]


@pytest.mark.parametrize(
    ("recovery", "timeout", "expected", "why"), RECOVERY, ids=[r[3] for r in RECOVERY]
)
def test_recovery_seconds(
    recovery: str | None, timeout: str, expected: float | None, why: str
) -> None:
    """The recovery timeout in force."""
    settings = WaitForPodsReady(enable=True, timeout=timeout, recovery_timeout=recovery)
    assert recovery_seconds(settings) == expected, why


CREATED, EVICTED_AT = 1_000.0, 4_600.0
# Kueue's TestGetQueueOrderTimestamp (pkg/workload/workload_test.go), replayed, and the
# admission check case of GetQueueOrderTimestamp: (case, last eviction, Eviction, Creation).
ORDER: list[tuple[str, tuple[str, float] | None, float, float]] = [
    ("no condition", None, CREATED, CREATED),
    ("evicted by preemption", ("Preempted", EVICTED_AT), CREATED, CREATED),
    ("evicted by PodsReady timeout", ("PodsReadyTimeout", EVICTED_AT), EVICTED_AT, CREATED),
    ("after eviction", None, CREATED, CREATED),  # readmitted since: no eviction in force
    (
        "evicted by admission check (GetQueueOrderTimestamp, any timestamp)",
        ("AdmissionCheck", EVICTED_AT),
        EVICTED_AT,
        EVICTED_AT,
    ),
    (
        "deactivated past the requeue limit",
        ("RequeuingLimitExceeded", EVICTED_AT),
        CREATED,
        CREATED,
    ),
]


@pytest.mark.parametrize(
    ("case", "eviction", "by_eviction", "by_creation"),
    ORDER,
    ids=[f"TestGetQueueOrderTimestamp/{o[0]}" for o in ORDER],
)
def test_queue_order_time(
    case: str, eviction: tuple[str, float] | None, by_eviction: float, by_creation: float
) -> None:
    """requeuingStrategy.timestamp: Eviction queues a pods-ready eviction by its time."""
    assert queue_order_time(CREATED, eviction, "Eviction") == by_eviction, case
    assert queue_order_time(CREATED, eviction, "Creation") == by_creation, case
