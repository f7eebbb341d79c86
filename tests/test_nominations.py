"""Preemptions in flight (services/admission/nominations.py): a preemptor is released once
the last victim evicted for it has left, and only then."""

from __future__ import annotations

import pytest

from services.admission.nominations import Nominations
from shared.events import WorkloadRef
from tests.scheduler_world import admitted, scheduler, simple, wl
from tests.scheduler_world import ref as sched_ref


def ref(name: str) -> WorkloadRef:
    return WorkloadRef("ns", name, f"uid-{name}")


# (victims asked to go per preemptor, who left in order, released preemptors, why)
CASES = [
    ({"p": ["v1"]}, ["v1"], ["p"], "its only victim left"),
    ({"p": ["v1", "v2"]}, ["v1"], [], "one victim still leaving"),
    ({"p": ["v1", "v2"]}, ["v2", "v1"], ["p"], "the last victim left, whatever the order"),
    ({"p": ["v1"]}, ["x"], [], "a workload nobody preempted for leaves"),
    ({"p": ["v1"], "q": ["v2"]}, ["v2", "v1"], ["q", "p"], "released in the order they end"),
    ({"p": ["v1"]}, ["v1", "v1"], ["p"], "a victim reported twice releases once"),
]


@pytest.mark.parametrize(
    ("asked", "left", "released", "why"), CASES, ids=[case[3] for case in CASES]
)
def test_a_preemptor_is_released_when_its_last_victim_left(
    asked: dict[str, list[str]], left: list[str], released: list[str], why: str
) -> None:
    nominations = Nominations()
    for preemptor, victims in asked.items():
        for victim in victims:
            nominations.add(ref(preemptor), ref(victim).uid)
    returned = [nominations.left(ref(victim).uid) for victim in left]
    assert [r.name for r in returned if r is not None] == released, why
    assert [r.name for r in nominations.take_released()] == released, why
    assert nominations.take_released() == [], "each release is taken once"


def test_leaving_names_the_victims_a_preemptor_still_waits_for() -> None:
    nominations = Nominations()
    nominations.add(ref("p"), "uid-v1")
    nominations.add(ref("p"), "uid-v2")
    nominations.left("uid-v1")
    assert nominations.leaving("uid-p") == {"uid-v2"}
    nominations.left("uid-v2")
    assert nominations.leaving("uid-p") == frozenset()


# The core's side: Scheduler.eviction_requested / left / schedule. (victim's generation named
# in the request, whether it finished before the request, is small held back, why)
REQUESTS = [
    (1, False, True, "the victim holds this admission's quota: the room is kept"),
    (2, False, False, "another admission of the victim: it frees nothing for the preemptor"),
    (1, True, False, "the victim finished first: it will never be reported leaving"),
]


@pytest.mark.parametrize(
    ("generation", "finished", "held", "why"), REQUESTS, ids=[case[3] for case in REQUESTS]
)
def test_an_eviction_request_nominates_the_preemptor_only_for_a_victim_holding_quota(
    generation: int, finished: bool, held: bool, why: str
) -> None:
    s = scheduler(simple(cpu=4), wl("victim", cpu=1, t=0), wl("other", cpu=2, t=1))
    assert admitted(s.schedule()) == ["victim", "other"]
    s.submit(wl("preemptor", cpu=4, t=2, priority=100))
    s.submit(wl("small", cpu=1, t=3))
    if finished:
        s.finish(sched_ref("victim"))
    s.eviction_requested(sched_ref("victim"), generation, sched_ref("preemptor"))
    assert ("small" not in admitted(s.schedule())) == held, why


def test_a_nomination_ends_one_pass_after_its_last_victim_left() -> None:
    """The preemptor keeps the room through the pass that follows its victims' leaving (it
    may fit now); if it still does not fit, its queue admits others from the next pass."""
    s = scheduler(simple(cpu=4), wl("victim", cpu=1, t=0), wl("other", cpu=2, t=1))
    assert admitted(s.schedule()) == ["victim", "other"]
    s.submit(wl("preemptor", cpu=4, t=2, priority=100))
    s.submit(wl("small", cpu=1, t=3))
    s.eviction_requested(sched_ref("victim"), 1, sched_ref("preemptor"))
    assert admitted(s.schedule()) == []  # small would fit; the room is the preemptor's
    assert s.leaving(sched_ref("preemptor")) == {"uid-victim"}
    s.evict(sched_ref("victim"))
    assert s.left(sched_ref("victim")) == sched_ref("preemptor")
    assert admitted(s.schedule()) == []  # still nominated in this pass; 4 cpus don't fit
    assert s.leaving(sched_ref("preemptor")) == frozenset()
    assert "small" in admitted(s.schedule())


# (boost, may the boost preempt, priority it preempts with, why)
BOOSTS = [
    (None, False, 5, "no boost: the base priority"),
    (10, False, 5, "a boost that may not preempt does not count"),
    (10, True, 15, "a boost that may preempt counts"),
]


@pytest.mark.parametrize(
    ("boost", "can_preempt", "expected", "why"), BOOSTS, ids=[case[3] for case in BOOSTS]
)
def test_the_preempting_priority_counts_the_boost_only_if_it_may_preempt(
    boost: int | None, can_preempt: bool, expected: int, why: str
) -> None:
    s = scheduler(simple(cpu=1), wl("job", cpu=2, priority=5))
    if boost is not None:
        s.set_boost(sched_ref("job"), boost, can_preempt=can_preempt)
    assert s.preempting_priority(sched_ref("job")) == expected, why
