"""Admission asks the preemption service for a search only where a candidate may exist, and
asks again as soon as one may (services/admission/preemption_asks.py, shared/candidates.py).

On the real admission core: passes decide, services.admission.decisions turns them into the
reports that go out, and what a later turn asks again is read as the service reads it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from services.admission.decisions import Decisions
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.model import Admission
from services.admission.pending_throttle import PendingThrottle
from services.admission.preemption_asks import STALE_SLACK, PreemptionAsks
from services.admission.scheduler import QueuedWorkload, Scheduler
from shared.candidates import NO_CANDIDATES, AskFacts, may_find_candidates
from shared.config import ConfigObject
from shared.events import ContestedResource, Event, PodSet, WorkloadPending
from shared.quantities import parse_quantity
from tests.test_scheduler import config, cq, flavor, group, lq, ref, wl, wpc

# --- the rule ------------------------------------------------------------------------------

BASE = AskFacts("LowerPriority", "Never", priority=100, lowest_admitted=None, lenders=False)
RULE_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("nothing admitted in its queue, nobody lends: no candidate", {}, False),
    ("a lower priority runs in its queue", {"lowest_admitted": 50}, True),
    ("only its own priority runs there: LowerPriority takes none", {"lowest_admitted": 100}, False),
    (
        "its own priority runs there: LowerOrNewerEqualPriority may take a newer one",
        {"lowest_admitted": 100, "within_cluster_queue": "LowerOrNewerEqualPriority"},
        True,
    ),
    ("only higher priorities run there", {"lowest_admitted": 200}, False),
    (
        "withinClusterQueue Never: a lower priority there is no candidate",
        {"lowest_admitted": 50, "within_cluster_queue": "Never"},
        False,
    ),
    ("a queue of its cohort borrows, but reclaimWithinCohort is Never", {"lenders": True}, False),
    (
        "a queue of its cohort borrows in what it contests: reclaimed",
        {"lenders": True, "reclaim_within_cohort": "Any"},
        True,
    ),
    (
        "reclaimWithinCohort LowerPriority: any lender counts (a larger answer, never smaller)",
        {"lenders": True, "reclaim_within_cohort": "LowerPriority"},
        True,
    ),
    (
        "a reason the search must run: asked whatever else",
        {"must_ask": "hierarchical cohorts"},
        True,
    ),
]


@pytest.mark.parametrize(
    ("reason", "change", "expected"), RULE_CASES, ids=[case[0] for case in RULE_CASES]
)
def test_may_find_candidates(reason: str, change: dict[str, Any], expected: bool) -> None:
    assert may_find_candidates(BASE._replace(**change)) is expected, reason


# --- on the admission core -----------------------------------------------------------------

HIGH, LOW = "high", "low"


def one_queue(cpu: int = 9, **preemption: str) -> list[ConfigObject]:
    return config(
        flavor("default-flavor"),
        cq(
            "cq",
            group(["cpu"], ("default-flavor", {"cpu": cpu})),
            preemption=preemption or {"withinClusterQueue": "LowerPriority"},
        ),
        lq("user-queue", "cq"),
        wpc(HIGH, 1000),
        wpc(LOW, 100),
    )


def cohort(**preemption: str) -> list[ConfigObject]:
    """Queues a and b of 5 CPUs each in one cohort; b may borrow all of a's."""
    return config(
        flavor("default-flavor"),
        cq("a", group(["cpu"], ("default-flavor", {"cpu": 5})), cohort="ab", preemption=preemption),
        cq("b", group(["cpu"], ("default-flavor", {"cpu": 5})), cohort="ab"),
        lq("queue-a", "a"),
        lq("queue-b", "b"),
        wpc(HIGH, 1000),
        wpc(LOW, 100),
    )


class Core:
    """The core with the service's parts that make and hold reports."""

    def __init__(self, objects: list[ConfigObject]) -> None:
        self.core = Scheduler()
        self.core.set_config(objects)
        self.throttle = PendingThrottle(1.0)
        self.asks = PreemptionAsks()
        self.decisions = Decisions(
            self.core, {}, Gates(), ExecutionLimits(), self.throttle, self.asks
        )

    def turn(self, *submitted: QueuedWorkload) -> tuple[list[str], dict[str, WorkloadPending]]:
        """Submit, run a pass; the names admitted, and each workload's newest report (those
        the throttle holds included: they go out when it lets them). What the pass asks
        again is left for :meth:`asked_again`, as the service reads it after the pass."""
        for workload in submitted:
            self.core.submit(workload)
        decisions = self.core.schedule()
        admitted = [d.ref.name for d in decisions if isinstance(d, Admission)]
        events: list[Event] = self.decisions.events(decisions, [])
        events += self.throttle.due(time.monotonic() + 2.0)
        return admitted, {e.workload.name: e for e in events if isinstance(e, WorkloadPending)}

    def turns(self, *submitted: QueuedWorkload) -> dict[str, WorkloadPending]:
        """:meth:`turn` and what it asks again (none expected), as one turn of the service."""
        reports = self.turn(*submitted)[1]
        assert self.asked_again() == []
        return reports

    def asked_again(self) -> list[str]:
        return [report.workload.name for report in self.decisions.asked_again()]


def job(
    name: str, cpu: int, priority: str, queue: str = "user-queue", t: float = 0.0
) -> QueuedWorkload:
    return wl(name, queue=queue, t=t, cpu=str(cpu), priority_class=priority)


def unasked(report: WorkloadPending) -> bool:
    return not report.preemption_may_help and report.message.endswith(f"; {NO_CANDIDATES}")


# (reason, what runs first, the waiting workload, whether its report asks preemption)
FIRST_REPORT_CASES: list[tuple[str, list[QueuedWorkload], QueuedWorkload, bool]] = [
    (
        "only its own priority runs in its queue: no candidate, not asked",
        [job("running", 4, HIGH)],
        job("waiting", 6, HIGH, t=1),
        False,
    ),
    (
        "a lower priority runs in its queue: asked at once",
        [job("running", 4, LOW)],
        job("waiting", 6, HIGH, t=1),
        True,
    ),
    (
        "a workload that may run with fewer pods: asked (the answer shrinks it)",
        [job("running", 4, HIGH)],
        QueuedWorkload(
            ref=ref("waiting"),
            local_queue="user-queue",
            pod_sets=[
                PodSet(name="main", count=6, min_count=2, requests={"cpu": parse_quantity("1")})
            ],
            queue_time=1,
            priority_class=HIGH,
        ),
        True,
    ),
]


@pytest.mark.parametrize(
    ("reason", "first", "waiting", "asks"),
    FIRST_REPORT_CASES,
    ids=[case[0] for case in FIRST_REPORT_CASES],
)
def test_first_report(
    reason: str, first: list[QueuedWorkload], waiting: QueuedWorkload, asks: bool
) -> None:
    admission = Core(one_queue())
    assert admission.turn(*first)[0] == [w.ref.name for w in first], reason
    admitted, reports = admission.turn(waiting)
    assert admitted == [], reason
    report = reports["waiting"]
    assert report.preemption_may_help is asks, reason
    assert unasked(report) is not asks, reason
    assert len(admission.asks) == (0 if asks else 1), reason


def test_a_lower_priority_admitted_later_asks_again() -> None:
    """Held for want of a candidate, the report asks preemption once a lower priority is
    admitted in its queue (it fits beside it), and is no longer held; the one asked again
    is the report as decided, at its priority."""
    admission = Core(one_queue())
    admission.turn(job("running", 4, HIGH))
    assert unasked(admission.turn(job("waiting", 6, HIGH, t=1))[1]["waiting"])
    assert admission.asked_again() == []  # nothing admitted since: nothing to look at
    assert admission.turn(job("small", 2, LOW, t=2))[0] == ["small"]
    [report] = admission.decisions.asked_again()
    assert report.workload.name == "waiting" and report.preemption_may_help
    assert NO_CANDIDATES not in report.message and report.priority == 1000 and report.id
    assert len(admission.asks) == 0 and admission.asked_again() == []


def test_an_equal_priority_admitted_later_asks_nothing() -> None:
    admission = Core(one_queue())
    admission.turns(job("running", 4, HIGH))
    admission.turns(job("waiting", 6, HIGH, t=1))
    assert admission.turn(job("small", 2, HIGH, t=2))[0] == ["small"]
    assert admission.asked_again() == [] and len(admission.asks) == 1


def test_a_queue_of_its_cohort_that_starts_borrowing_asks_again() -> None:
    """Reclaim: a is full with its own priority, b within its quota; once b borrows (above
    its 5 CPUs), a's waiting workload may reclaim from it."""
    admission = Core(cohort(reclaimWithinCohort="Any", withinClusterQueue="LowerPriority"))
    admission.turns(job("a-running", 4, HIGH, "queue-a"))
    admission.turns(job("b-running", 4, HIGH, "queue-b", t=1))
    report = admission.turns(job("a-waiting", 3, HIGH, "queue-a", t=2))["a-waiting"]
    assert unasked(report), "b within its quota lends nothing"
    assert admission.turn(job("b-borrows", 2, HIGH, "queue-b", t=3))[0] == ["b-borrows"]
    assert admission.asked_again() == ["a-waiting"]


def test_a_boost_above_what_runs_asks_again() -> None:
    admission = Core(one_queue())
    admission.turns(job("running", 4, HIGH))
    admission.turns(job("waiting", 6, HIGH, t=1))
    admission.core.set_boost(ref("waiting"), 5, can_preempt=True)
    assert admission.asked_again() == [], "judged again only when told"
    admission.asks.boosted("uid-waiting")
    assert admission.asked_again() == ["waiting"]


def test_a_new_configuration_asks_again() -> None:
    """withinClusterQueue turned to LowerOrNewerEqualPriority: the workload of its own
    priority that runs, admitted after it was created, may be preempted now."""
    admission = Core(one_queue())
    admission.turns(job("running", 4, HIGH, t=5))
    admission.turns(job("waiting", 6, HIGH, t=1))
    admission.core.set_config(one_queue(withinClusterQueue="LowerOrNewerEqualPriority"))
    assert admission.asked_again() == [], "judged again only when told"
    admission.asks.reconfigured()
    assert admission.asked_again() == ["waiting"]


def test_admitted_or_gone_is_let_go() -> None:
    """A held workload admitted after all, or deleted, is asked for nothing."""
    admission = Core(one_queue())
    admission.turn(job("running", 4, HIGH))
    admission.turn(job("waiting", 6, HIGH, t=1), job("other", 7, HIGH, t=2))
    assert len(admission.asks) == 2
    admission.core.finish(ref("running"))
    assert admission.turn()[0] == ["waiting"]  # its admission forgets its hold
    admission.core.delete(ref("other"))
    admission.turn(job("small", 1, LOW, t=3))
    assert admission.asked_again() == [] and len(admission.asks) == 0


def test_a_newer_report_without_the_ask_drops_the_held_one() -> None:
    """A held report is not asked later once a newer decision needs no preemption at all:
    here the queue shrank below the workload's request (it can never fit), and the policy
    that would make its neighbour a candidate came with it."""
    admission = Core(one_queue())
    admission.turns(job("running", 4, HIGH, t=5))
    admission.turns(job("waiting", 6, HIGH, t=1))
    admission.core.set_config(one_queue(cpu=5, withinClusterQueue="LowerOrNewerEqualPriority"))
    admission.asks.reconfigured()
    report = admission.turn()[1]["waiting"]
    assert not report.preemption_may_help and "request > maximum capacity" in report.message
    assert admission.asked_again() == [] and len(admission.asks) == 0


def two_queues(cohort_name: str | None) -> list[ConfigObject]:
    """Queues a and b of 5 CPUs each, alone or in one cohort; a reclaims within it."""
    joined = {"cohort": cohort_name} if cohort_name else {}
    return config(
        flavor("default-flavor"),
        cq(
            "a",
            group(["cpu"], ("default-flavor", {"cpu": 5})),
            preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            **joined,
        ),
        cq("b", group(["cpu"], ("default-flavor", {"cpu": 5})), **joined),
        lq("queue-a", "a"),
        lq("queue-b", "b"),
        wpc(HIGH, 1000),
        wpc(LOW, 100),
    )


def test_a_queue_moved_into_a_cohort_is_asked_when_one_there_borrows() -> None:
    """Held while its ClusterQueue stood alone; once a configuration puts it in a cohort,
    the first queue there that borrows makes it asked (its held report follows the new
    cohort tree)."""
    admission = Core(two_queues(None))
    admission.turns(job("a-running", 4, HIGH, "queue-a"))
    admission.turns(job("b-running", 4, HIGH, "queue-b", t=1))
    admission.turns(job("a-waiting", 3, HIGH, "queue-a", t=2))
    assert len(admission.asks) == 1
    admission.core.set_config(two_queues("ab"))
    admission.asks.reconfigured()
    admission.turns()  # judged again: nobody borrows yet
    assert admission.turn(job("b-borrows", 2, HIGH, "queue-b", t=3))[0] == ["b-borrows"]
    assert admission.asked_again() == ["a-waiting"]


def test_held_again_alike_adds_no_heap_entry() -> None:
    """A workload held again with the same priority and contested resources (its message's
    numbers changed) keeps its one heap entry; stale entries are dropped past a bound."""
    admission = Core(one_queue())
    admission.turns(job("running", 4, HIGH))
    admission.core.submit(job("waiting", 6, HIGH, t=1))
    admission.core.schedule()
    contested = (("default-flavor", "cpu"),)
    facts = admission.core.ask_facts(ref("waiting"), "cq", contested)
    assert facts is not None and not may_find_candidates(facts)
    asks = admission.asks
    for needed in range(10_000):
        report = WorkloadPending(
            source="admission",
            workload=ref("waiting"),
            cluster_queue="cq",
            reason="Pending",
            message=f"{needed} more needed",
            priority=1000,
            preemption_may_help=True,
            contested=[ContestedResource("default-flavor", "cpu", 6000)],
        )
        assert asks.hold(report, facts, "cq", contested)
    assert len(asks) == 1 and asks.entries == 1
    for lower in range(3_000):  # each at another priority: a new entry each time
        assert asks.hold(report, facts._replace(priority=999 - lower), "cq", contested)
    asks.asked(admission.core)
    assert len(asks) == 1 and asks.entries <= 2 * len(asks) + STALE_SLACK


def test_reported_again_though_nothing_changed() -> None:
    """``report_again``: a workload decided again and reported although its verdict is the
    one it had (a replica taking over does this for reports another leader sent without
    the ask)."""
    admission = Core(one_queue())
    admission.turns(job("running", 4, HIGH))
    assert "waiting" in admission.turns(job("waiting", 6, HIGH, t=1))
    assert admission.core.schedule() == [], "nothing changed: nothing decided"
    admission.asks.clear()
    admission.core.report_again(ref("waiting"))
    decisions = admission.core.schedule()
    assert [d.ref.name for d in decisions] == ["waiting"]
    admission.decisions.events(decisions, [])
    assert len(admission.asks) == 1, "held again: still no candidate"
