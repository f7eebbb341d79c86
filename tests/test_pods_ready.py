"""waitForPodsReady: Kueue's backoff, the requeue limit, and the clock admission keeps
(services/admission/pods_ready.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.admission.pods_ready import (
    PodsReadyClock,
    after_timeout,
    backoff_seconds,
    not_ready_timeout,
    queue_order_time,
    recovery_seconds,
)
from shared.admission_checks import RequeuingStrategy, WaitForPodsReady
from shared.events import (
    AnyEvent,
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
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
    clock.apply(_EVICT)  # generation 1, PodsReadyTimeout, with a requeue time
    clock.apply(_EVICT)
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


def _ready(generation: int, at: float, *, ready: bool = True) -> WorkloadPodsReady:
    return WorkloadPodsReady(
        source="watcher",
        workload=REF,
        generation=generation,
        ready=ready,
        time=datetime.fromtimestamp(at, UTC),
    )


def _recovery_clock(recovery: str | None = "30s") -> PodsReadyClock:
    clock = PodsReadyClock()
    clock.configure(
        WaitForPodsReady(
            enable=True,
            timeout="10s",
            recovery_timeout=recovery,
            requeuing_strategy=RequeuingStrategy(backoff_limit_count=1, backoff_base_seconds=5),
        )
    )
    return clock


def test_lost_readiness_times_out_after_the_recovery_timeout() -> None:
    """Ready at 5s, lost at 100s: evicted (PodsReadyTimeout, cause WaitForRecovery) once 30s
    pass without recovery, not before, and once; the admission's own timeout is long over."""
    clock = _recovery_clock()
    clock.apply(_admitted(1, 0.0))
    assert clock.apply(_ready(1, 5.0)) == 0.0, "the first PodsReady: its admission time"
    clock.apply(_ready(1, 100.0, ready=False))
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
    clock = _recovery_clock()
    clock.apply(_admitted(1, 0.0))
    for fact, at in facts:
        if fact == "evicted":
            clock.apply(WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x"))
        else:
            generation = 0 if fact == "lost-old" else 1
            clock.apply(_ready(generation, at, ready=fact == "ready"))
    assert bool(clock.due(now)) is evicted, case


def test_recovery_off_never_evicts() -> None:
    """recoveryTimeout 0s: a workload that lost readiness is never timed out."""
    clock = _recovery_clock("0s")
    clock.apply(_admitted(1, 0.0))
    clock.apply(_ready(1, 5.0))
    clock.apply(_ready(1, 6.0, ready=False))
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
    enabled = _recovery_clock()
    late = PodsReadyClock()
    late.configure(WaitForPodsReady(enable=False))
    for clock in (enabled, late):
        clock.apply(_admitted(1, 0.0))
        for fact, at in facts:
            if fact == "evicted":
                clock.apply(
                    WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x")
                )
            elif fact != "off-on":
                clock.apply(_ready(1, at, ready=fact == "ready"))
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


ORDER_FOLD: list[tuple[str, str, list[str], float]] = [
    ("requeued after a pods-ready timeout: its eviction time", "Eviction", ["timeout"], 50.0),
    ("Creation: its creation time", "Creation", ["timeout"], 1.0),
    ("admitted again: the eviction no longer counts", "Eviction", ["timeout", "admitted"], 1.0),
    (
        "preempted after: the last eviction counts",
        "Eviction",
        ["timeout", "admitted", "preempted"],
        1.0,
    ),
    (
        "evicted unasked (watcher restart) after",
        "Eviction",
        ["timeout", "admitted", "restart"],
        1.0,
    ),
]


@pytest.mark.parametrize(
    ("case", "timestamp", "steps", "expected"), ORDER_FOLD, ids=[o[0] for o in ORDER_FOLD]
)
def test_order_time_from_events(
    case: str, timestamp: str, steps: list[str], expected: float
) -> None:
    """The order time a requeued workload gets, folded from the stream (creation at 1s)."""
    clock = PodsReadyClock()
    clock.configure(
        WaitForPodsReady(enable=True, requeuing_strategy=RequeuingStrategy(timestamp=timestamp))  # type: ignore[arg-type]
    )
    at = datetime.fromtimestamp(50.0, UTC)
    for step in steps:
        if step == "timeout":
            clock.apply(
                EvictionRequested(
                    source="admission",
                    workload=REF,
                    cluster_queue="cq",
                    generation=1,
                    reason="PodsReadyTimeout",
                    requeue_at=at,
                    time=at,
                )
            )
            clock.apply(
                WorkloadEvicted(
                    source="watcher", workload=REF, generation=1, reason="PodsReadyTimeout"
                )
            )
        elif step == "admitted":
            clock.apply(_admitted(2, 60.0))
        elif step == "preempted":
            clock.apply(
                EvictionRequested(
                    source="preemption",
                    workload=REF,
                    cluster_queue="cq",
                    generation=2,
                    reason="Preempted",
                )
            )
        else:
            clock.apply(
                WorkloadEvicted(
                    source="watcher", workload=REF, generation=2, reason="WatcherRestarted"
                )
            )
    assert clock.order_time(REF.uid, 1.0) == expected, case


def _folded_state(clock: PodsReadyClock) -> tuple[object, ...]:
    """Everything the clock keeps for REF, by kind of state."""
    uid = REF.uid
    waiting, ready = clock.waiting.get(uid), clock.ready.get(uid)
    return (
        None if waiting is None else (waiting.generation, waiting.at, waiting.lost_at),
        None if ready is None else (ready.generation, ready.at, ready.lost_at),
        clock.generations.get(uid),
        clock.evictions.get(uid),
        clock.requeued.get(uid),
        len(clock.deadlines),
        len(clock.recoveries),
    )


_EVICT = EvictionRequested(
    source="admission",
    workload=REF,
    cluster_queue="cq",
    generation=1,
    reason="PodsReadyTimeout",
    requeue_at=datetime.fromtimestamp(20.0, UTC),
    time=datetime.fromtimestamp(11.0, UTC),
)
_EVICTED = WorkloadEvicted(
    source="watcher", workload=REF, generation=1, reason="Preempted", time=_EVICT.time
)
_FINISHED = WorkloadFinished(source="watcher", workload=REF, generation=1, succeeded=True)
_DELETED = WorkloadDeleted(source="watcher", workload=REF)
_PENDING = WorkloadPending(
    source="admission", workload=REF, cluster_queue="cq", reason="r", message="m"
)
_STARTED = (None, (1, 0.0, None), 1, None, None, 1, 0)  # admitted at 0, pods ready

# (the events folded, what apply returned for the last, the state after, why): one case per
# kind of event the clock folds, and one it does not
FOLDS: list[tuple[list[AnyEvent], float | None, tuple[object, ...], str]] = [
    ([_admitted(1, 0.0)], None, ((1, 0.0, None), None, 1, None, None, 1, 0), "admitted: clock"),
    (
        [_admitted(1, 0.0, reserved_only=True)],
        None,
        (None, None, None, None, None, 0, 0),
        "only reserved: no clock, nothing kept",
    ),
    (
        [_admitted(1, 0.0), _ready(1, 5.0)],
        0.0,
        _STARTED,
        "first ready: returns the admission's time",
    ),
    (
        [_admitted(1, 0.0), _ready(2, 5.0)],
        None,
        ((1, 0.0, None), None, 1, None, None, 1, 0),
        "another generation's ready: ignored",
    ),
    (
        [_admitted(1, 0.0), _ready(1, 5.0), _ready(1, 7.0, ready=False)],
        None,
        ((1, 0.0, 7.0), None, 1, None, None, 1, 1),
        "readiness lost: waiting again, a recovery clock",
    ),
    (
        [_admitted(1, 0.0), _EVICT],
        None,
        (None, None, 1, ("PodsReadyTimeout", 11.0, 1), {1}, 1, 0),
        "eviction requested: left, its reason kept, a requeue counted",
    ),
    (
        [_admitted(1, 0.0), _EVICTED],
        None,
        (None, None, 1, ("Preempted", 11.0, 1), None, 1, 0),
        "evicted unasked: left, its reason kept",
    ),
    (
        [_admitted(1, 0.0), _ready(1, 5.0), _FINISHED],
        None,
        (None, None, 1, None, None, 1, 0),
        "done",
    ),
    (
        [_admitted(1, 0.0), _EVICT, _DELETED],
        None,
        (None, None, None, None, None, 1, 0),
        "deleted: nothing of it kept",
    ),
    ([_admitted(1, 0.0), _ready(1, 5.0), _PENDING], None, _STARTED, "a kind it does not fold"),
]


@pytest.mark.parametrize(("events", "returned", "state", "why"), FOLDS, ids=[f[3] for f in FOLDS])
def test_each_kind_of_event_folded(
    events: list[AnyEvent], returned: float | None, state: tuple[object, ...], why: str
) -> None:
    clock = _clock()
    answers = [clock.apply(event) for event in events]
    assert answers[-1] == returned, why
    assert _folded_state(clock) == state, why
