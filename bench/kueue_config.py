"""Kueue's scheduler performance scenarios (test/performance/scheduler/configs) as data.

See /work/shared/KUEUE-PERF-BENCH.md section 1: one ResourceFlavor ``rf``, ``cohorts x cqs``
ClusterQueues (nominal 20 CPU, borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue
LowerPriority), one Namespace and LocalQueue per ClusterQueue named like it, and per
ClusterQueue three independent creation streams (small, medium, large).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = [
    "CONFIGS",
    "ClassSpec",
    "ScenarioConfig",
    "WorkloadPlan",
    "plan_workloads",
    "workload_name",
]


@dataclass(frozen=True)
class ClassSpec:
    name: str
    count: int  # per ClusterQueue
    interval_ms: int
    request_cpu: int  # whole CPUs
    priority: int
    runtime_ms: int


@dataclass(frozen=True)
class ScenarioConfig:
    name: str
    cohorts: int
    cqs_per_cohort: int
    nominal_cpu: int
    borrowing_limit_cpu: int
    classes: tuple[ClassSpec, ...]
    cohort_class: str = "cohort"
    cq_class: str = "cq"
    # The ClusterQueues' preemption policy; Kueue's scenario uses Any / LowerPriority.
    reclaim_within_cohort: str = "Any"
    within_cluster_queue: str = "LowerPriority"
    # Berth's opt-in Configuration.spec.admission.borrowingYieldsToHigherPriority (not Kueue's).
    borrowing_yields: bool = False
    # Berth's opt-in Configuration.spec.admission.waitTargets: (minPriority or None, wait).
    wait_targets: tuple[tuple[int | None, str], ...] = ()
    # The ClusterQueues' queueingStrategy StrictFIFO (Kueue's scenario: BestEffortFIFO).
    strict_fifo: bool = False
    # Kueue's published means and thresholds (section 4 of the spec).
    kueue_mean: dict[str, float] = field(default_factory=dict)
    kueue_threshold: dict[str, float] = field(default_factory=dict)

    def scaled(self, fraction: float) -> ScenarioConfig:
        """The same shape with ``fraction`` of each stream's workloads (at least one)."""
        classes = tuple(replace(c, count=max(1, round(c.count * fraction))) for c in self.classes)
        return replace(self, classes=classes)

    def without_preemption(self) -> ScenarioConfig:
        """The same scenario with both preemption policies ``Never`` (not Kueue's)."""
        return replace(self, reclaim_within_cohort="Never", within_cluster_queue="Never")

    @property
    def preempts(self) -> bool:
        return (self.reclaim_within_cohort, self.within_cluster_queue) != ("Never", "Never")

    def cluster_queues(self) -> list[tuple[str, str]]:
        """(ClusterQueue name, cohort name), Kueue's naming ``<cq>-<set>-<idx>-<cohort>``."""
        result = []
        for c in range(self.cohorts):
            cohort = f"{self.cohort_class}-{c}"
            for q in range(self.cqs_per_cohort):
                result.append((f"{self.cq_class}-0-{q}-{cohort}", cohort))
        return result

    @property
    def total_workloads(self) -> int:
        return self.cohorts * self.cqs_per_cohort * sum(c.count for c in self.classes)


BASELINE = ScenarioConfig(
    name="baseline",
    cohorts=5,
    cqs_per_cohort=6,
    nominal_cpu=20,
    borrowing_limit_cpu=100,
    classes=(
        ClassSpec("small", 350, 100, 1, 50, 200),
        ClassSpec("medium", 100, 500, 5, 100, 500),
        ClassSpec("large", 50, 1200, 20, 200, 1000),
    ),
    kueue_mean={
        "wall": 351.1164,
        "usage": 55.9,
        "small": 215.468,
        "medium": 76.768,
        "large": 16.501,
    },
    kueue_threshold={"wall": 425.0, "usage": 50.0, "small": 260.0, "medium": 90.0, "large": 23.0},
)

LARGE_SCALE = ScenarioConfig(
    name="large-scale",
    cohorts=10,
    cqs_per_cohort=100,
    nominal_cpu=20,
    borrowing_limit_cpu=100,
    classes=(
        ClassSpec("small", 35, 60, 1, 50, 150),
        ClassSpec("medium", 11, 300, 5, 100, 350),
        ClassSpec("large", 4, 700, 20, 200, 700),
    ),
    kueue_mean={
        "wall": 1179.411,
        "usage": 38.64,
        "small": 700.379,
        "medium": 256.413,
        "large": 105.604,
    },
    kueue_threshold={
        "wall": 1416.0,
        "usage": 31.6,
        "small": 841.0,
        "medium": 308.0,
        "large": 128.0,
    },
)

CONFIGS = {"baseline": BASELINE, "large-scale": LARGE_SCALE}


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload of the scenario, at its nominal creation offset (no API latency)."""

    name: str
    cluster_queue: str
    cohort: str
    klass: ClassSpec
    set_index: int
    seq: int

    @property
    def nominal_offset(self) -> float:
        # Each stream sleeps its interval, then creates: the k-th (from 0) at (k+1) x interval.
        return (self.seq + 1) * self.klass.interval_ms / 1000.0


def workload_name(klass: ClassSpec, set_index: int, seq: int) -> str:
    """Kueue's name for a workload of the scenario: <class>-<wlSetIdx>-<seq>-<templateIdx>."""
    return f"{klass.name}-{set_index}-{seq}-0"


def plan_workloads(config: ScenarioConfig) -> list[WorkloadPlan]:
    plans = []
    for cq, cohort in config.cluster_queues():
        for set_index, klass in enumerate(config.classes):
            for seq in range(klass.count):
                name = workload_name(klass, set_index, seq)
                plans.append(WorkloadPlan(name, cq, cohort, klass, set_index, seq))
    return plans
