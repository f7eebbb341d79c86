"""What admission's waitForPodsReady clock (services/admission/pods_ready.py PodsReadyClock)
folds from the stream: the order time of a requeued workload, the requeue count, and the
state each kind of event leaves."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.admission.pods_ready import PodsReadyClock
from shared.admission_checks import RequeuingStrategy, WaitForPodsReady
from shared.events import (
    AnyEvent,
    EvictionRequested,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
)
from tests.pods_ready_facts import REF, admitted, pods_ready, timeout_clock

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
            clock.apply(admitted(2, 60.0))
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
    ([admitted(1, 0.0)], None, ((1, 0.0, None), None, 1, None, None, 1, 0), "admitted: clock"),
    (
        [admitted(1, 0.0, reserved_only=True)],
        None,
        (None, None, None, None, None, 0, 0),
        "only reserved: no clock, nothing kept",
    ),
    (
        [admitted(1, 0.0), pods_ready(1, 5.0)],
        0.0,
        _STARTED,
        "first ready: returns the admission's time",
    ),
    (
        [admitted(1, 0.0), pods_ready(2, 5.0)],
        None,
        ((1, 0.0, None), None, 1, None, None, 1, 0),
        "another generation's ready: ignored",
    ),
    (
        [admitted(1, 0.0), pods_ready(1, 5.0), pods_ready(1, 7.0, ready=False)],
        None,
        ((1, 0.0, 7.0), None, 1, None, None, 1, 1),
        "readiness lost: waiting again, a recovery clock",
    ),
    (
        [admitted(1, 0.0), _EVICT],
        None,
        (None, None, 1, ("PodsReadyTimeout", 11.0, 1), {1}, 1, 0),
        "eviction requested: left, its reason kept, a requeue counted",
    ),
    (
        [admitted(1, 0.0), _EVICTED],
        None,
        (None, None, 1, ("Preempted", 11.0, 1), None, 1, 0),
        "evicted unasked: left, its reason kept",
    ),
    (
        [admitted(1, 0.0), pods_ready(1, 5.0), _FINISHED],
        None,
        (None, None, 1, None, None, 1, 0),
        "done",
    ),
    (
        [admitted(1, 0.0), _EVICT, _DELETED],
        None,
        (None, None, None, None, None, 1, 0),
        "deleted: nothing of it kept",
    ),
    ([admitted(1, 0.0), pods_ready(1, 5.0), _PENDING], None, _STARTED, "a kind it does not fold"),
]


@pytest.mark.parametrize(("events", "returned", "state", "why"), FOLDS, ids=[f[3] for f in FOLDS])
def test_each_kind_of_event_folded(
    events: list[AnyEvent], returned: float | None, state: tuple[object, ...], why: str
) -> None:
    clock = timeout_clock()
    answers = [clock.apply(event) for event in events]
    assert answers[-1] == returned, why
    assert _folded_state(clock) == state, why


def test_a_redelivered_eviction_counts_once() -> None:
    """The requeue count comes from the eviction events (a restarted admission agrees), and
    the same eviction folded twice is one requeue."""
    clock = timeout_clock(limit=None)
    clock.apply(_EVICT)  # generation 1, PodsReadyTimeout, with a requeue time
    clock.apply(_EVICT)
    assert clock.requeued[REF.uid] == {1}
