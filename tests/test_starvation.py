"""The starvation bound's formula and its conditions (shared/starvation.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from services.recovery.ageing import reservation_granted
from shared.config import AgeingPolicy, ClusterQueue, ClusterQueuePolicy, parse_object
from shared.starvation import (
    DECISION_CYCLE_SECONDS,
    Earlier,
    QueueFacts,
    Waiting,
    ageing_clock,
    fits_share,
    queue_facts,
    runs_by,
)

D = DECISION_CYCLE_SECONDS
CPU4 = QueueFacts("cq", {"cpu": 4000}, {"cpu": 1}, {"cpu": False}, preempts=True)


def policy(**spec: Any) -> ClusterQueuePolicy:
    """A ClusterQueuePolicy: reserveAfter 60s, protectFor 10s, grace 5s unless given."""
    ageing = {"reserveAfter": "60s", "protectFor": "10s", **spec.pop("ageing", {})}
    body = {"evictionGracePeriod": "5s", "ageing": ageing, **spec}
    obj = parse_object(
        {"apiVersion": "berth.dev/v1alpha1", "kind": "ClusterQueuePolicy",
         "metadata": {"name": "p"}, "spec": body}
    )  # fmt: skip
    assert isinstance(obj, ClusterQueuePolicy)
    return obj


def cpu(n: float) -> dict[str, int]:
    return {"cpu": int(n * 1000)}


@dataclass
class Case:
    why: str
    waiting: Waiting
    at: float | None  # the bound, or None with ``reason`` in the message
    reason: str = ""
    policy: dict[str, Any] = field(default_factory=dict)


def wait(**kwargs: Any) -> Waiting:
    values: dict[str, Any] = {
        "queue": CPU4, "request": cpu(2), "since": 1000.0, "waiting_since": 1000.0
    }  # fmt: skip
    return Waiting(**{**values, **kwargs})


STEP = 5 + D  # grace + decision cycle
CASES: dict[str, Case] = {
    "plain": Case(
        "Alone: reservation at since + reserveAfter, protection, two steps, one cycle.",
        wait(),
        1000 + 60 + 10 + 2 * STEP + D,
    ),
    "later_wait": Case(
        "A wait that began after the reservation time counts from the wait.",
        wait(waiting_since=2000.0),
        2000 + 10 + 2 * STEP + D,
    ),
    "minimum_run_time_longer": Case(
        "minimumRunTime longer than protectFor is the protection that counts.",
        wait(),
        1000 + 60 + 30 + 2 * STEP + D,
        policy={"minimumRunTime": "30s"},
    ),
    "one_ahead": Case(
        "Each earlier-aged workload still there adds one step.",
        wait(request=cpu(1), earlier=[Earlier(cpu(1), None)]),
        1000 + 60 + 10 + 3 * STEP + D,
    ),
    "ended_before": Case(
        "An earlier-aged workload that ended before the reservation adds nothing.",
        wait(earlier=[Earlier(cpu(2), 1010.0)]),
        1000 + 60 + 10 + 2 * STEP + D,
    ),
    "share_later": Case(
        "Over the share at first, the reservation starts when an earlier one ends.",
        wait(request=cpu(1), earlier=[Earlier(cpu(1), 1500.0), Earlier(cpu(1), None)]),
        1500 + 10 + 3 * STEP + D,
    ),
    "share_never_yet": Case(
        "Earlier ones that have not ended hold the share: no bound yet.",
        wait(earlier=[Earlier(cpu(1), None), Earlier(cpu(1), None)]),
        None,
        "started ageing first",
    ),
    "no_clock_yet": Case(
        "Without a clock yet (plain, or never preempted): its wait's start is its clock-to-be.",
        wait(since=None, waiting_since=1500.0),
        1500 + 60 + 10 + 2 * STEP + D,
    ),
    "queue_ahead": Case(
        "Waiting workloads whose wait began first go first: each adds a step.",
        wait(since=None, request=cpu(1), earlier=[Earlier(cpu(1), None, count=1)]),
        1000 + 60 + 10 + 3 * STEP + D,
    ),
    "queue_ahead_over_share": Case(
        "Those ahead, with it, over the share: no bound until some of them end.",
        wait(since=None, request=cpu(1), earlier=[Earlier(cpu(2), None, count=2)]),
        None,
        "waits for 2 workload(s)",
    ),
    "ties_end_together": Case(
        "Two earlier ones ending at the same moment leave room together.",
        wait(request=cpu(1), earlier=[Earlier(cpu(1), 1500.0), Earlier(cpu(1), 1500.0)]),
        1500 + 10 + 2 * STEP + D,
    ),
    "inactive": Case(
        "An inactive queue or workload: the reason admission gives.",
        wait(blocked="ClusterQueue cq is inactive (Stopped)"),
        None,
        "inactive",
    ),
    "reservations_off": Case(
        "reserveAfter: null turns the bound off.",
        wait(),
        None,
        "reserveAfter: null",
        policy={"ageing": {"reserveAfter": None}},
    ),
    "over_nominal": Case(
        "A workload larger than the nominal quota never fits.",
        wait(request=cpu(5)),
        None,
        "nominal quota",
    ),
    "over_share": Case(
        "A workload larger than the share reservations may hold.",
        wait(request=cpu(3)),
        None,
        "50% of the quota",
    ),
    "whole_share": Case(
        "maxReservedShare 1 lets a reservation take the whole quota.",
        wait(request=cpu(4)),
        1000 + 60 + 10 + 2 * STEP + D,
        policy={"ageing": {"maxReservedShare": 1}},
    ),
    "never_preempts": Case(
        "withinClusterQueue Never: nothing can be preempted for it.",
        wait(queue=QueueFacts("cq", cpu(4), {"cpu": 1}, {"cpu": False}, preempts=False)),
        None,
        "withinClusterQueue: Never",
    ),
    "lends": Case(
        "Quota lent to a cohort can be taken while it waits.",
        wait(queue=QueueFacts("cq", cpu(4), {"cpu": 1}, {"cpu": True}, True, "co")),
        None,
        "lendingLimit: 0",
    ),
    "two_flavors": Case(
        "Two flavors for one resource: not covered yet.",
        wait(queue=QueueFacts("cq", cpu(8), {"cpu": 2}, {"cpu": False}, preempts=True)),
        None,
        "2 flavors",
    ),
    "unknown_resource": Case(
        "A resource the ClusterQueue does not have.",
        wait(request={"nvidia.com/gpu": 1000}),
        None,
        "unavailable",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str) -> None:
    """Each case gives its bound, or no bound with its reason."""
    case = CASES[name]
    bound = runs_by(policy(**case.policy), case.waiting)
    assert bound.at == (None if case.at is None else float(int(case.at + 0.999))), case.why
    if case.at is None:
        assert case.reason in bound.reason, (case.why, bound.reason)
    else:
        assert bound.timestamp is not None and bound.reason.startswith("reserved from")


def test_the_default_policy() -> None:
    """Built-in defaults: 10m reservation, 2m protection, 30s grace, half the quota."""
    spec = ClusterQueuePolicy(api_version="berth.dev/v1alpha1", metadata=policy().metadata)
    bound = runs_by(spec, wait())
    assert bound.at == 1000 + 600 + 120 + 2 * (30 + D) + D


def _cq(spec: dict[str, Any]) -> ClusterQueue:
    obj = parse_object(
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
         "metadata": {"name": "cq"}, "spec": spec}
    )  # fmt: skip
    assert isinstance(obj, ClusterQueue)
    return obj


def test_queue_facts_from_a_cluster_queue() -> None:
    """Nominal per resource over flavors, flavors counted, lending only in a cohort."""
    groups = [
        {
            "coveredResources": ["cpu"],
            "flavors": [
                {"name": "a", "resources": [{"name": "cpu", "nominalQuota": 4}]},
                {"name": "b", "resources": [{"name": "cpu", "nominalQuota": 2}]},
            ],
        },
        {
            "coveredResources": ["memory"],
            "flavors": [
                {"name": "a", "resources": [{"name": "memory", "nominalQuota": "1Gi",
                                            "lendingLimit": 0}]},
            ],
        },
    ]  # fmt: skip
    alone = queue_facts(_cq({"resourceGroups": groups}))
    assert alone.nominal == {"cpu": 6000, "memory": 1024**3 * 1000}
    assert alone.flavors == {"cpu": 2, "memory": 1}
    assert alone.lends == {"cpu": False, "memory": False} and not alone.preempts
    shared = queue_facts(_cq({"resourceGroups": groups, "cohort": "co"}))
    assert shared.lends == {"cpu": True, "memory": False}


def test_share_and_grant() -> None:
    """The share rule, as recovery grants reservations with it."""
    assert fits_share(0.5, cpu(4), [cpu(1), cpu(1)])
    assert not fits_share(0.5, cpu(4), [cpu(1), cpu(1.5)])


MEM = {"memory": 8 << 30}
PRICES: list[tuple[str, float, dict[str, int], dict[str, int], list[dict[str, int]], bool]] = [
    # (why, maxReservedShare, request, nominal, earlier clocks' requests, granted)
    ("alone, within the share", 0.5, cpu(2), cpu(4), [], True),
    ("alone, over the share: the higher classes keep their half", 0.5, cpu(3), cpu(4), [], False),
    ("with the earlier clocks, within it", 0.5, cpu(1), cpu(4), [cpu(1)], True),
    ("the earlier clocks fill it: it waits for one of them to end", 0.5, cpu(2), cpu(4),
     [cpu(1)], False),
    ("earlier clocks count whether they run or wait, summed", 0.75, cpu(1), cpu(4),
     [cpu(1), cpu(1)], True),
    ("share 1: reservations may hold the whole quota", 1.0, cpu(4), cpu(4), [], True),
    ("share 0: no reservation, ever", 0.0, cpu(1), cpu(4), [], False),
    ("per resource: cpu within, memory over", 0.5, cpu(1) | {"memory": 5 << 30}, cpu(4) | MEM,
     [], False),
    ("per resource: an earlier clock's other resource takes nothing from this one", 0.5,
     cpu(2), cpu(4) | MEM, [{"memory": 4 << 30}], True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("why", "share", "asked", "nominal", "earlier", "granted"), PRICES, ids=[p[0] for p in PRICES]
)
def test_the_price_rule(
    why: str,
    share: float,
    asked: dict[str, int],
    nominal: dict[str, int],
    earlier: list[dict[str, int]],
    granted: bool,
) -> None:
    """What ageing may cost a higher class: a due reservation is granted only within
    maxReservedShare of the nominal quota, together with every earlier clock
    (``reservation_granted``, docs/ageing.md "The price")."""
    ageing = AgeingPolicy(max_reserved_share=share)
    answer = reservation_granted(ageing, request=asked, nominal=nominal, earlier=earlier)
    assert answer is granted, why


CLOCKS = [
    # (why, since, waiting since, now, reserveAfter, clock)
    ("a clock once set is kept", 5.0, 100.0, 200.0, 60.0, 5.0),
    ("a wait shorter than reserveAfter: no clock yet", None, 100.0, 159.0, 60.0, None),
    ("a wait of reserveAfter: the clock is its start", None, 100.0, 160.0, 60.0, 100.0),
    ("reservations off: no clock", None, 100.0, 10_000.0, None, None),
    ("reserveAfter 0: a clock from the first moment", None, 100.0, 100.0, 0.0, 100.0),
]


@pytest.mark.parametrize(("why", "since", "waiting_since", "now", "after", "clock"), CLOCKS)
def test_ageing_clock(
    why: str, since: float | None, waiting_since: float, now: float, after: float | None,
    clock: float | None,
) -> None:  # fmt: skip
    """Every pending workload's ageing clock (shared.starvation.ageing_clock)."""
    got = ageing_clock(since=since, waiting_since=waiting_since, now=now, reserve_after=after)
    assert got == clock, why
