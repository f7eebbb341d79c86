"""waitForPodsReady: Kueue's backoff, the requeue limit, and the clock admission keeps
(services/admission/pods_ready.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.admission.pods_ready import (
    PodsReadyClock,
    after_timeout,
    backoff_seconds,
)
from shared.admission_checks import RequeuingStrategy, WaitForPodsReady
from shared.events import (
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPodsReady,
    WorkloadRef,
)

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


REF = WorkloadRef("default", "job", "uid-1")


def _admitted(generation: int, at: float, *, reserved_only: bool = False) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[],
        generation=generation,
        reserved_only=reserved_only,
        time=datetime.fromtimestamp(at, UTC),
    )


def _clock(limit: int | None = 1, block: bool | None = None) -> PodsReadyClock:
    clock = PodsReadyClock()
    clock.configure(
        WaitForPodsReady(
            enable=True,
            timeout="10s",
            block_admission=block,
            requeuing_strategy=RequeuingStrategy(backoff_limit_count=limit, backoff_base_seconds=5),
        )
    )
    clock.random.seed(1)
    return clock


def test_ready_pods_are_never_timed_out() -> None:
    """A PodsReady fact of the admitted generation stops the clock."""
    clock = _clock()
    clock.apply(_admitted(1, 0.0))
    clock.apply(WorkloadPodsReady(source="watcher", workload=REF, generation=1))
    assert clock.due(100.0) == []


def test_a_reservation_waiting_for_checks_has_no_clock() -> None:
    """The timeout counts from admission, not from a reservation still waiting for checks."""
    clock = _clock()
    clock.apply(_admitted(1, 0.0, reserved_only=True))
    assert clock.due(100.0) == [] and not clock.blocking()


def test_timeout_requeues_with_backoff_then_deactivates_past_the_limit() -> None:
    """First timeout: evicted (PodsReadyTimeout) with a requeue time 5s on; the second, over
    backoffLimitCount 1, deactivates (RequeuingLimitExceeded); each decided once."""
    clock = _clock(limit=1)
    clock.apply(_admitted(1, 0.0))
    assert clock.due(9.0) == [], "not before the timeout"
    [first] = clock.due(10.0)
    assert first.reason == "PodsReadyTimeout" and not first.deactivated
    assert first.requeue_at is not None
    assert 15.0 <= first.requeue_at.timestamp() <= 15.001
    assert clock.due(11.0) == [], "decided once"
    clock.apply(first)  # its echo counts the requeue
    clock.apply(WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x"))
    clock.apply(_admitted(2, 20.0))
    [second] = clock.due(30.0)
    assert second.reason == "RequeuingLimitExceeded" and second.deactivated
    assert second.requeue_at is None


def test_a_redelivered_eviction_counts_once() -> None:
    """The requeue count comes from the eviction events (a restarted admission agrees), and
    the same eviction folded twice is one requeue."""
    clock = _clock(limit=None)
    eviction = EvictionRequested(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        generation=1,
        reason="PodsReadyTimeout",
        requeue_at=datetime.fromtimestamp(5.0, UTC),
    )
    clock.apply(eviction)
    clock.apply(eviction)
    assert clock.requeued[REF.uid] == {1}


BLOCKING: list[tuple[bool | None, bool, bool, str]] = [
    (None, False, True, "blockAdmission defaults to enable: a workload not ready blocks"),
    (False, False, False, "blockAdmission false: never blocks"),
    (None, True, False, "ready pods: nothing blocks"),
]


@pytest.mark.parametrize(
    ("block", "ready", "expected", "why"), BLOCKING, ids=[b[3] for b in BLOCKING]
)
def test_blocking(block: bool | None, ready: bool, expected: bool, why: str) -> None:
    """blockAdmission: while an admitted workload's pods are not ready, nothing is admitted."""
    clock = _clock(block=block)
    clock.apply(_admitted(1, 0.0))
    if ready:
        clock.apply(WorkloadPodsReady(source="watcher", workload=REF, generation=1))
    assert clock.blocking() is expected, why
