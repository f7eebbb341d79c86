"""Whether a preemptor can have any candidate at all: the first question of Kueue's
preemption oracle (SimulatePreemption's NoCandidates), asked by admission before it asks the
preemption service for a search (services/admission/preemption_asks.py); the search itself
finds them (services/preemption/ordering.py, ``find_candidates``)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["NO_CANDIDATES", "AskFacts", "may_find_candidates"]

# Kueue's words for it (scheduler.go); the preemption service says the same after a search.
NO_CANDIDATES = (
    "Workload requires preemption, but there are no candidate workloads allowed for preemption"
)


class AskFacts(NamedTuple):
    """What admission knows now about one pending workload whose flavor assignment says
    preemption may help (services/admission/placement.py, ``Placement.ask_facts``). A tuple:
    one is made per such report."""

    within_cluster_queue: str  # its ClusterQueue's preemption policy
    reclaim_within_cohort: str
    priority: int  # the priority it preempts with (Placement.preempting_priority)
    lowest_admitted: int | None  # the lowest base priority admitted in its ClusterQueue
    lenders: bool  # another ClusterQueue of its cohort tree borrows in a contested resource
    must_ask: str = ""  # why the search must run whatever the above say ("": no reason)


def may_find_candidates(facts: AskFacts) -> bool:
    """Whether the preemption service's candidate search (Kueue's findCandidates) could find
    anyone for this workload; a superset of its answer, never a subset.

    - **Must ask** (``must_ask`` says why): searches this rule does not model: an ageing
      reservation (it searches above every priority), a nominated preemptor (its victims are
      leaving), a workload that may run with fewer pods (preemption's answer shrinks it),
      hierarchical cohorts, borrowWithinCohort.
    - **Its own ClusterQueue**, unless withinClusterQueue is Never: a running workload of
      lower priority (LowerOrNewerEqualPriority: equal too). Judged on the lowest *base*
      priority admitted there: an ageing boost only raises a run's priority, and the search
      discounts it once the run's protection ends.
    - **Its cohort tree**, unless reclaimWithinCohort is Never: another ClusterQueue that
      borrows in a contested flavor-resource now (any priority: LowerPriority's filter is not
      applied, which only makes the answer larger).

    The search's other filters (the contested resources a run uses, minimum run times,
    budgets) only remove candidates, so they are not needed for a "no"."""
    if facts.must_ask:
        return True
    lowest = facts.lowest_admitted
    if facts.within_cluster_queue != "Never" and lowest is not None:
        if lowest < facts.priority:
            return True
        if lowest == facts.priority and facts.within_cluster_queue == "LowerOrNewerEqualPriority":
            return True
    return facts.reclaim_within_cohort != "Never" and facts.lenders
