"""The benchmarks' check of a run's event log: was quota ever over-committed?

``quota_violations`` replays the log (``shared.eventlog``) in stream order, which is the order
admission itself saw the facts in, and reports every instant where a ClusterQueue or a cohort
held more than it may. ``read_events`` is re-exported for the benchmarks' convenience;
``signed_in_as`` gives it (and any tool that takes its bus credentials from the environment)
the stack's seed to sign in with.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.eventlog import read_events, usage_changes
from shared.events import AnyEvent

__all__ = ["Violation", "quota_violations", "read_events", "signed_in_as"]


@contextlib.contextmanager
def signed_in_as(seed: Path | None) -> Iterator[None]:
    """Within the block, bus clients that read ``BERTH_CREDS`` sign in with ``seed`` (the
    environment is restored after; None leaves it as it is)."""
    if seed is None:
        yield
        return
    before = os.environ.get("BERTH_CREDS")
    os.environ["BERTH_CREDS"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BERTH_CREDS", None)
        else:
            os.environ["BERTH_CREDS"] = before


@dataclass
class Violation:
    owner: str  # ClusterQueue or cohort
    used: int  # milli-CPU
    limit: int
    event_index: int


def quota_violations(
    events: list[AnyEvent],
    *,
    cq_limit: Mapping[str, int],
    cohort_of: Mapping[str, str],
    cohort_limit: Mapping[str, int],
    resource: str = "cpu",
) -> tuple[list[Violation], dict[str, int]]:
    """Instants where usage exceeded a limit, and the peak usage per cohort.

    A workload holds quota from its WorkloadAdmitted until the WorkloadFinished or
    WorkloadEvicted of that generation (or its WorkloadDeleted).
    """
    cq_used: dict[str, int] = {}
    cohort_used: dict[str, int] = {}
    peak: dict[str, int] = {}
    violations: list[Violation] = []
    for change in usage_changes(events):
        cq = change.cluster_queue
        if change.while_holding:  # admitted again without a release: an over-commit
            violations.append(Violation(cq, -1, 0, change.index))
        cohort = cohort_of.get(cq, cq)
        value = change.sign * sum(v for (_, r), v in change.usage.items() if r == resource)
        cq_used[cq] = cq_used.get(cq, 0) + value
        cohort_used[cohort] = cohort_used.get(cohort, 0) + value
        if change.sign < 0:
            continue
        peak[cohort] = max(peak.get(cohort, 0), cohort_used[cohort])
        if cq_used[cq] > cq_limit.get(cq, 0):
            violations.append(Violation(cq, cq_used[cq], cq_limit.get(cq, 0), change.index))
        if cohort_used[cohort] > cohort_limit.get(cohort, 0):
            limit = cohort_limit.get(cohort, 0)
            violations.append(Violation(cohort, cohort_used[cohort], limit, change.index))
    return violations, peak
