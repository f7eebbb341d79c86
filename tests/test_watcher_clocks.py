"""The clocks of simulated runs (services/watcher/local/simulated.py): when a run ends
(``due_at``), and that runs ending at one millisecond share one timer without a stopped run's
finish being reported."""

from __future__ import annotations

from typing import Any

import pytest

from services.watcher.local.simulated import Clocks, Simulated, due_at
from shared.events import WorkloadRef

# (loop time at the start, runtime s, why)
DUE_CASES = [
    (10.0, 0.2, "on a whole millisecond already: then"),
    (10.0001, 0.2, "between two milliseconds: the next one, never early"),
    (0.1, 0.2, "a float sum just over a millisecond (0.30000000000000004): the next one"),
    (12345.6789, 1.5, "a long-running loop"),
    (3.0, 0.0, "no runtime: at once"),
]


@pytest.mark.parametrize(("now", "seconds", "why"), DUE_CASES)
def test_a_run_ends_at_the_millisecond_after_its_time(now: float, seconds: float, why: str) -> None:
    due = due_at(now, seconds)
    assert now + seconds <= due < now + seconds + 0.001, why
    assert round(due * 1000) == due * 1000, f"{why}: a whole millisecond"


class _Loop:
    """Stands for the event loop: its time is set by the test; timers are recorded, rung by
    the test (a timer's callback is what the loop would call)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Any, float]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any, *args: float) -> None:
        self.timers.append((when, callback, *args))


def _run(name: str) -> Simulated:
    return Simulated(f"ns.{name}", WorkloadRef(namespace="ns", name=name, uid=name), 1)


# (starts: (name, loop time, runtime s), names stopped before their time, timers, ended, why)
CLOCK_CASES = [
    (
        [("a", 1.0001, 0.5), ("b", 1.0002, 0.5), ("c", 1.0004, 0.5)],
        [],
        1,
        ["a", "b", "c"],
        "started in one round with one runtime: one timer, each ends, in start order",
    ),
    (
        [("a", 1.0, 0.5), ("b", 1.0, 2.0)],
        [],
        2,
        ["a", "b"],
        "another runtime: another timer",
    ),
    (
        [("a", 1.0, 0.5), ("b", 1.0, 0.5), ("c", 1.0, 0.5)],
        ["b"],
        1,
        ["a", "c"],
        "a run stopped (evicted, deleted) before its time is skipped, the others end",
    ),
    (
        [("a", 1.0, 0.5), ("b", 1.0009, 0.5)],
        [],
        2,
        ["a", "b"],
        "ending in the next millisecond: not held back or rung early with the first",
    ),
]


@pytest.mark.parametrize(("starts", "stopped", "timers", "ended", "why"), CLOCK_CASES)
def test_runs_ending_together_share_a_timer(
    starts: list[tuple[str, float, float]],
    stopped: list[str],
    timers: int,
    ended: list[str],
    why: str,
) -> None:
    loop = _Loop()
    rung: list[tuple[str, float]] = []  # (run, loop time when its clock rang)
    clocks = Clocks(lambda run: rung.append((run.ref.name, loop.now)))
    runs = {}
    for name, now, seconds in starts:
        loop.now = now
        runs[name] = run = _run(name)
        clocks.start(run, seconds, loop)  # type: ignore[arg-type]
    assert len(loop.timers) == timers, why
    for name in stopped:
        runs[name].stopping = True
    for when, callback, *args in sorted(loop.timers, key=lambda timer: timer[0]):
        loop.now = when
        callback(*args)
    assert [name for name, _ in rung] == ended, why
    ends = {name: now + seconds for name, now, seconds in starts}
    assert all(ends[name] <= at < ends[name] + 0.001 for name, at in rung), f"{why}: on time"
    assert clocks.due == {}, f"{why}: nothing left once every timer rang"
