"""What the victim search reads and returns: plain values, no I/O; frozen but ``Running``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from shared.events import WorkloadRef
from shared.quota import FlavorResource

__all__ = ["Preemptor", "Reason", "Running", "SearchResult", "Victim"]

# Kueue's Preempted condition reasons.
Reason = Literal[
    "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing"
]


@dataclass(slots=True)
class Running:
    """An admitted workload as preemption sees it. Never changed once built: not frozen
    only because the fold builds one per admission, and a frozen dataclass sets each field
    through ``object.__setattr__``, a cost the fold would pay every time."""

    ref: WorkloadRef
    cluster_queue: str
    priority: int  # the priority it was admitted with
    queue_time: float  # creation time ("newer" = later queue_time)
    admitted_at: float  # for "most recently admitted first"
    usage: Mapping[FlavorResource, int]
    evicting: bool = False  # an eviction is already in flight: such candidates come first
    preemptions: int = 0  # times preempted in the hour before this admission


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The pending workload that does not fit."""

    ref: WorkloadRef
    cluster_queue: str
    priority: int
    queue_time: float
    # Its total usage per (flavor, resource). Pass all of it: the flavor-resources where it
    # does not fit now are derived from it, and a non-borrowing attempt checks every entry.
    needs: Mapping[FlavorResource, int]


@dataclass(frozen=True, slots=True)
class Victim:
    workload: Running
    reason: Reason


@dataclass(frozen=True, slots=True)
class SearchResult:
    victims: tuple[Victim, ...]  # empty when preemption cannot help
    message: str  # when empty: why; else a summary
