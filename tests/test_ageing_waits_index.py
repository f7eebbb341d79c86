"""Recovery's ageing tick looks only at the waits that can get a clock (services/recovery/
waiting.py ``Waits.ageing``: young ones wait in a heap until they have lasted the least
``reserveAfter``), and must give exactly the clocks, in the same order, that a look at every
wait gives (``scanned``, the tick as it was before the index). The table names each way a
wait comes back to be looked at or leaves; the property runs random histories in lockstep."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from services.recovery import waiting
from services.recovery.waiting import Wait, Waits
from shared.events import AnyEvent, WorkloadRef
from shared.starvation import ageing_clock
from tests.test_starvation_waits import (
    admitted,
    boosted,
    deleted,
    evicted,
    finished,
    pending,
    submitted,
)


def scanned(waits: Waits, now: float, after: Callable[[str], float | None],
            least: float | None) -> list[Wait]:  # fmt: skip
    """The tick before the index: every wait looked at, in the order they were folded."""
    shortest = float("inf") if least is None else least
    for wait in waits.waits.values():
        if (wait.since is None and now - wait.waiting_since >= shortest and not wait.running
                and wait.cluster_queue):  # fmt: skip
            wait.since = ageing_clock(since=None, waiting_since=wait.waiting_since, now=now,
                                      reserve_after=after(wait.cluster_queue))  # fmt: skip
    return [wait for wait in waits.waits.values() if wait.since is not None]


AFTERS = {"cq": 60.0, "slow": 120.0, "off": None}  # reserveAfter per ClusterQueue


def _after(queue: str) -> float | None:
    return AFTERS[queue]


@dataclass(frozen=True)
class Tick:
    now: float
    least: float | None = 60.0


Step = AnyEvent | Tick


def _clocks(waits: Waits, tick: Tick, *, scan: bool = False) -> list[tuple[str, float | None]]:
    """Each clock at ``tick`` by the index (by looking at every wait with ``scan``)."""
    if scan:
        return [(w.ref.uid, w.since) for w in scanned(waits, tick.now, _after, tick.least)]
    return [(w.ref.uid, w.since) for w in waits.ageing(tick.now, _after, least=tick.least)]


def _run(steps: list[Step]) -> list[list[tuple[str, float | None]]]:
    """Every tick's clocks from the index, checked against those of a look at every wait."""
    indexed, reference = Waits(), Waits()
    seen = []
    for step in steps:
        if isinstance(step, Tick):
            seen.append(_clocks(indexed, step))
            assert seen[-1] == _clocks(reference, step, scan=True)
        else:
            indexed.apply(step)
            reference.apply(step)
    return seen


CASES: list[tuple[str, list[Step], float | None]] = [
    # (why, steps, the clock at the last tick)
    ("young at one tick, old enough at the next: looked at then",
     [submitted(100), pending(101), Tick(159), Tick(160)], 100.0),
    ("it ran when it came out of the heap; its eviction's wait is looked at once it lasts",
     [submitted(100), pending(101), admitted(120, 1), Tick(170), evicted(200, 1), Tick(259),
      Tick(260)], 200.0),
    ("admitted and evicted between two ticks while ripe: the new wait's start counts",
     [submitted(100), replace(pending(101), cluster_queue="slow"), Tick(165, least=30),
      admitted(166, 1), evicted(170, 1), Tick(289, least=30), Tick(290, least=30)], 170.0),
    ("ended while ripe: never given a clock",
     [submitted(100), Tick(170), finished(171), Tick(300)], None),
    ("no ClusterQueue when ripe: looked at each tick until a pending report names one",
     [submitted(100), Tick(170), Tick(180), pending(181), Tick(182)], 100.0),
    ("its queue's reserveAfter is longer than the least: ripe until it lasts that",
     [submitted(100), replace(pending(101), cluster_queue="slow"), Tick(170), Tick(219),
      Tick(220)], 100.0),
    ("reservations off in its queue: ripe for good, never a clock",
     [submitted(100), replace(pending(101), cluster_queue="off"), Tick(170), Tick(10_000)],
     None),
    ("the least grew after it came out (a policy change): no clock before the new least",
     [submitted(100), pending(101), Tick(131, least=30), Tick(150, least=120), Tick(219, 120),
      Tick(220, 120)], 100.0),
    ("reservations off everywhere (least None): nothing comes out, nothing aged",
     [submitted(100), pending(101), Tick(10_000, least=None)], None),
    ("a clock read back while ripe: that clock, not a new one",
     [submitted(100), pending(101), Tick(170, least=120), boosted(90), Tick(171)], 90.0),
    ("a clock read back while young: that clock at once",
     [submitted(100), pending(101), boosted(90), Tick(101)], 90.0),
    ("deleted, then the same uid submitted again: a new wait from its new creation",
     [submitted(100), pending(101), deleted(), submitted(500), pending(501), Tick(559),
      Tick(560)], 500.0),
]  # fmt: skip


@pytest.mark.parametrize(("why", "steps", "clock"), CASES, ids=[c[0] for c in CASES])
def test_the_index_gives_the_clocks_of_a_look_at_every_wait(
    why: str, steps: list[Step], clock: float | None
) -> None:
    seen = _run(steps)
    assert dict(seen[-1]).get("u1") == clock, why


def test_stale_entries_are_dropped_when_they_outnumber_the_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many waits that ended young leave no heap behind them (it is made anew), and the
    waits still young come out of the new heap as before."""
    monkeypatch.setattr(waiting, "YOUNG_SLACK", 0)
    waits, reference = Waits(), Waits()
    for number in range(50):
        ref = WorkloadRef("ns", f"w{number}", f"u{number}")
        for fact in (replace(submitted(100 + number), workload=ref),
                     replace(pending(101 + number), workload=ref)):  # fmt: skip
            waits.apply(fact)
            reference.apply(fact)
        if number % 5:  # four in five end young
            waits.apply(replace(finished(120 + number), workload=ref))
            reference.apply(replace(finished(120 + number), workload=ref))
    assert len(waits._young) <= 2 * len(waits.waits) + 1  # made anew as waits ended
    assert _clocks(waits, Tick(1_000)) == _clocks(reference, Tick(1_000), scan=True)
    assert [uid for uid, _ in _clocks(waits, Tick(1_000))] == [f"u{n}" for n in range(0, 50, 5)]


# --- random histories in lockstep ----------------------------------------------------------------

UIDS = ["u1", "u2", "u3"]
QUEUES = ["cq", "slow", "off", ""]


def _ref(uid: str) -> WorkloadRef:
    return WorkloadRef("ns", uid, uid)


@st.composite
def histories(draw: st.DrawFn) -> list[Step]:
    steps: list[Step] = []
    now = 100.0
    for _ in range(draw(st.integers(1, 40))):
        now += draw(st.sampled_from([0.0, 1.0, 20.0, 59.0, 61.0]))
        uid = _ref(draw(st.sampled_from(UIDS)))
        generation = draw(st.integers(1, 3))
        kind = draw(st.sampled_from(["sub", "pend", "adm", "evict", "fin", "del", "boost", "tick"]))
        if kind == "sub":
            steps.append(replace(submitted(now - draw(st.sampled_from([0, 30, 90]))), workload=uid))
        elif kind == "pend":
            steps.append(
                replace(pending(now), workload=uid, cluster_queue=draw(st.sampled_from(QUEUES)))
            )
        elif kind == "adm":
            steps.append(replace(admitted(now, generation), workload=uid,
                                 reserved_only=draw(st.booleans())))  # fmt: skip
        elif kind == "evict":
            steps.append(replace(evicted(now, generation), workload=uid))
        elif kind == "fin":
            steps.append(replace(finished(now), workload=uid))
        elif kind == "del":
            steps.append(replace(deleted(), workload=uid))
        elif kind == "boost":
            steps.append(replace(boosted(now - 50), workload=uid))
        else:
            steps.append(Tick(now, draw(st.sampled_from([None, 0.0, 30.0, 60.0, 120.0]))))
    return [*steps, Tick(now + 1_000)]


@pytest.mark.parametrize(
    "slack", [0, waiting.YOUNG_SLACK], ids=["heap made anew at every push", "default"]
)
@settings(max_examples=300, deadline=None)
@given(steps=histories())
def test_random_histories_age_as_a_look_at_every_wait(slack: int, steps: list[Step]) -> None:
    saved = waiting.YOUNG_SLACK
    waiting.YOUNG_SLACK = slack
    try:
        _run(steps)
    finally:
        waiting.YOUNG_SLACK = saved
