"""The clock admission keeps for waitForPodsReady (services/admission/pods_ready.py
PodsReadyClock): the start and recovery timeouts, what blocks admission, and clocks enabled
after the admissions they time."""

from __future__ import annotations

import pytest

from services.admission.pods_ready import PodsReadyClock
from shared.admission_checks import WaitForPodsReady
from shared.events import WorkloadEvicted, WorkloadPodsReady
from tests.pods_ready_facts import REF, admitted, pods_ready, recovery_clock, timeout_clock


def test_ready_pods_are_never_timed_out() -> None:
    """A PodsReady fact of the admitted generation stops the clock."""
    clock = timeout_clock()
    clock.apply(admitted(1, 0.0))
    clock.apply(WorkloadPodsReady(source="watcher", workload=REF, generation=1))
    assert clock.due(100.0) == []


def test_a_reservation_waiting_for_checks_has_no_clock() -> None:
    """The timeout counts from admission, not from a reservation still waiting for checks."""
    clock = timeout_clock()
    clock.apply(admitted(1, 0.0, reserved_only=True))
    assert clock.due(100.0) == [] and not clock.blocking()


def test_timeout_requeues_with_backoff_then_deactivates_past_the_limit() -> None:
    """First timeout: evicted (PodsReadyTimeout) with a requeue time 5s on; the second, over
    backoffLimitCount 1, deactivates (RequeuingLimitExceeded); each decided once."""
    clock = timeout_clock(limit=1)
    clock.apply(admitted(1, 0.0))
    assert clock.due(9.0) == [], "not before the timeout"
    [first] = clock.due(10.0)
    assert first.reason == "PodsReadyTimeout" and not first.deactivated
    assert first.requeue_at is not None
    assert 15.0 <= first.requeue_at.timestamp() <= 15.001
    assert clock.due(11.0) == [], "decided once"
    clock.apply(first)  # its echo counts the requeue
    clock.apply(WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x"))
    clock.apply(admitted(2, 20.0))
    [second] = clock.due(30.0)
    assert second.reason == "RequeuingLimitExceeded" and second.deactivated
    assert second.requeue_at is None


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
    clock = timeout_clock(block=block)
    clock.apply(admitted(1, 0.0))
    if ready:
        clock.apply(WorkloadPodsReady(source="watcher", workload=REF, generation=1))
    assert clock.blocking() is expected, why


def test_lost_readiness_times_out_after_the_recovery_timeout() -> None:
    """Ready at 5s, lost at 100s: evicted (PodsReadyTimeout, cause WaitForRecovery) once 30s
    pass without recovery, not before, and once; the admission's own timeout is long over."""
    clock = recovery_clock()
    clock.apply(admitted(1, 0.0))
    assert clock.apply(pods_ready(1, 5.0)) == 0.0, "the first PodsReady: its admission time"
    clock.apply(pods_ready(1, 100.0, ready=False))
    assert clock.blocking(), "a recovering workload is not ready: it blocks admission"
    assert clock.due(129.0) == []
    [eviction] = clock.due(130.0)
    assert (eviction.reason, eviction.detail) == ("PodsReadyTimeout", "WaitForRecovery")
    assert eviction.requeue_at is not None and "recovery timeout 30s" in eviction.message
    assert clock.due(200.0) == []


RECOVERY_CASES: list[tuple[str, list[tuple[str, float]], float, bool]] = [
    ("recovered in time: no eviction", [("ready", 5), ("lost", 100), ("ready", 120)], 500, False),
    (
        "lost again after recovering: counts from the new loss",
        [("ready", 5), ("lost", 100), ("ready", 120), ("lost", 200)],
        229,
        False,
    ),
    (
        "lost again after recovering, due",
        [("ready", 5), ("lost", 100), ("ready", 120), ("lost", 200)],
        230,
        True,
    ),
    (
        "a loss before any readiness is not a loss: the start clock (10s) runs, not recovery",
        [("lost", 3)],
        10,
        True,
    ),
    (
        "a redelivered loss keeps the first time",
        [("ready", 5), ("lost", 100), ("lost", 120)],
        130,
        True,
    ),
    ("a loss of an old generation changes nothing", [("ready", 5), ("lost-old", 100)], 500, False),
    (
        "evicted meanwhile: nothing left to time out",
        [("ready", 5), ("lost", 100), ("evicted", 101)],
        500,
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "facts", "now", "evicted"), RECOVERY_CASES, ids=[c[0] for c in RECOVERY_CASES]
)
def test_recovery_clock(
    case: str, facts: list[tuple[str, float]], now: float, evicted: bool
) -> None:
    """The recovery clock from the watcher's facts (recoveryTimeout 30s)."""
    clock = recovery_clock()
    clock.apply(admitted(1, 0.0))
    for fact, at in facts:
        if fact == "evicted":
            clock.apply(WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x"))
        else:
            generation = 0 if fact == "lost-old" else 1
            clock.apply(pods_ready(generation, at, ready=fact == "ready"))
    assert bool(clock.due(now)) is evicted, case


def test_recovery_off_never_evicts() -> None:
    """recoveryTimeout 0s: a workload that lost readiness is never timed out."""
    clock = recovery_clock("0s")
    clock.apply(admitted(1, 0.0))
    clock.apply(pods_ready(1, 5.0))
    clock.apply(pods_ready(1, 6.0, ready=False))
    assert clock.due(10_000.0) == []


# (why, the facts before waitForPodsReady is enabled (steps: admitted at 0, then ready or
# lost at a time), when it is enabled, then asked: the evictions (reason, cause) a clock
# enabled from the start gives too)
LATE_ENABLE_CASES: list[tuple[str, list[tuple[str, float]], float, list[tuple[str, str]]]] = [
    ("admitted, never ready: the start clock from its admission", [], 10, [("x", "WaitForStart")]),
    ("not before the timeout", [], 9, []),
    ("ready meanwhile: nothing to time out", [("ready", 5)], 500, []),
    ("lost readiness meanwhile: the recovery clock", [("ready", 5), ("lost", 100)], 129, []),
    ("its 30s from the loss", [("ready", 5), ("lost", 100)], 130, [("x", "WaitForRecovery")]),
    ("evicted meanwhile: none", [("evicted", 1)], 500, []),
    ("enabled, disabled, enabled again", [("off-on", 2)], 10, [("x", "WaitForStart")]),
]


@pytest.mark.parametrize(
    ("why", "facts", "now", "expected"), LATE_ENABLE_CASES, ids=[c[0] for c in LATE_ENABLE_CASES]
)
def test_clocks_of_what_was_admitted_before_enabling(
    why: str, facts: list[tuple[str, float]], now: float, expected: list[tuple[str, str]]
) -> None:
    """While waitForPodsReady is off, no deadline is kept (due times nothing out); enabled,
    the clocks of the admissions folded meanwhile run as if it had been on all along (fails
    if the heaps are not made again from the waiting runs)."""
    enabled = recovery_clock()
    late = PodsReadyClock()
    late.configure(WaitForPodsReady(enable=False))
    for clock in (enabled, late):
        clock.apply(admitted(1, 0.0))
        for fact, at in facts:
            if fact == "evicted":
                clock.apply(
                    WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x")
                )
            elif fact != "off-on":
                clock.apply(pods_ready(1, at, ready=fact == "ready"))
    assert late.deadlines == late.recoveries == [], "off: no heap entry"
    assert late.due(now) == [], "off: nothing timed out"
    if ("off-on", 2) in facts:  # on, then off again: still nothing kept
        late.configure(enabled.settings)
        late.configure(WaitForPodsReady(enable=False))
        assert late.deadlines == late.recoveries == []
    late.configure(enabled.settings)
    late.random.seed(1)
    enabled.random.seed(1)
    got = [(e.reason, e.detail) for e in late.due(now)]
    assert got == [(e.reason, e.detail) for e in enabled.due(now)], why
    assert got == [("PodsReadyTimeout", cause) for _, cause in expected], why
