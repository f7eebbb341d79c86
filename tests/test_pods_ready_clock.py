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


# (why, the steps after an admission at 0 while waitForPodsReady is off: ready, lost or
# evicted at a time, or the setting turned on or off at a time; when asked; the causes of
# the evictions due then). Timeout 10 s, recoveryTimeout 30 s.
LATE_ENABLE_CASES: list[tuple[str, list[tuple[str, float]], float, list[str]]] = [
    ("never ready: its clock starts at the enabling, not its admission", [("on", 50)], 59, []),
    ("never ready: 10 s after the enabling", [("on", 50)], 60, ["WaitForStart"]),
    ("admitted as it is enabled: from its admission", [("on", 0)], 10, ["WaitForStart"]),
    ("ready meanwhile: nothing to time out", [("ready", 5), ("on", 50)], 500, []),
    ("lost while off: recovery from the enabling", [("ready", 5), ("lost", 20), ("on", 50)], 79, []),
    (
        "lost while off: 30 s after the enabling",
        [("ready", 5), ("lost", 20), ("on", 50)],
        80,
        ["WaitForRecovery"],
    ),
    ("lost once on: 30 s from the loss", [("ready", 5), ("on", 50), ("lost", 100)], 129, []),
    (
        "lost once on: due at 30 s",
        [("ready", 5), ("on", 50), ("lost", 100)],
        130,
        ["WaitForRecovery"],
    ),
    ("evicted meanwhile: none", [("evicted", 1), ("on", 50)], 500, []),
    ("on, off, on again: from the last enabling", [("on", 2), ("off", 3), ("on", 50)], 59, []),
    ("on, off, on: due then", [("on", 2), ("off", 3), ("on", 50)], 60, ["WaitForStart"]),
]


@pytest.mark.parametrize(
    ("why", "steps", "now", "expected"), LATE_ENABLE_CASES, ids=[c[0] for c in LATE_ENABLE_CASES]
)
def test_clocks_of_what_was_admitted_before_enabling(
    why: str, steps: list[tuple[str, float]], now: float, expected: list[str]
) -> None:
    """While waitForPodsReady is off, no deadline is kept (due times nothing out); turned on,
    the clocks of the runs admitted meanwhile start then (the watcher reported no readiness
    while it was off: services/watcher/pods_ready_gate.py), a later loss's from the loss."""
    settings = recovery_clock().settings
    clock = PodsReadyClock()
    clock.configure(WaitForPodsReady(enable=False), now=-1)
    clock.apply(admitted(1, 0.0))
    for step, at in steps:
        if step == "evicted":
            clock.apply(WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x"))
        elif step in ("on", "off"):
            if not clock.timing:
                assert clock.deadlines == clock.recoveries == [], "off: no heap entry"
                assert clock.due(10_000.0) == [], "off: nothing timed out"
            clock.configure(settings if step == "on" else WaitForPodsReady(enable=False), now=at)
        else:
            clock.apply(pods_ready(1, at, ready=step == "ready"))
    due = clock.due(now)
    assert [e.detail for e in due] == expected, why
    assert all(e.reason == "PodsReadyTimeout" for e in due)
