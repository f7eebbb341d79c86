"""The ideal schedule: the reference row of the Kueue scheduler benchmark.

No decision latency, greedy in priority order (then creation time), BestEffortFIFO (a
workload that does not fit is skipped, the next one is tried), no preemption. A workload
runs from its admission for exactly its run time and frees its quota when it ends. A
ClusterQueue may use up to nominal + borrowingLimit, a cohort at most the sum of its members'
nominal quotas. Simulated in-process, event by event.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

from bench.kueue_config import ScenarioConfig, WorkloadPlan, plan_workloads

__all__ = ["IdealResult", "simulate_ideal"]


@dataclass
class IdealResult:
    wall: float  # first arrival time origin (t0 = 0) to the last finish
    waits: dict[str, list[float]]  # class -> time to admission of each workload
    finish: float

    def avg_wait(self, klass: str) -> float:
        values = self.waits.get(klass) or [0.0]
        return sum(values) / len(values)

    def max_wait(self, klass: str) -> float:
        return max(self.waits.get(klass) or [0.0])


def simulate_ideal(
    config: ScenarioConfig, *, all_at_start: bool = False, strict: bool = False
) -> IdealResult:
    """With ``all_at_start`` every workload exists at t=0; with ``strict`` a workload that does
    not fit blocks every lower-priority one of its cohort (a variant, not the reference)."""
    plans = plan_workloads(config)
    cq_limit = (config.nominal_cpu + config.borrowing_limit_cpu) * 1000
    cohort_limit = config.nominal_cpu * config.cqs_per_cohort * 1000
    arrivals: list[tuple[float, int, WorkloadPlan]] = []
    for index, plan in enumerate(plans):
        arrivals.append((0.0 if all_at_start else plan.nominal_offset, index, plan))
    arrivals.sort(key=lambda item: (item[0], item[1]))
    # Pending per cohort, ordered by (-priority, creation, index).
    pending: dict[str, list[tuple[int, float, int, WorkloadPlan]]] = defaultdict(list)
    cq_usage: dict[str, int] = defaultdict(int)
    cohort_usage: dict[str, int] = defaultdict(int)
    running: list[tuple[float, int, WorkloadPlan]] = []  # (end, index, plan)
    waits: dict[str, list[float]] = defaultdict(list)
    now = 0.0
    last_finish = 0.0
    a = 0
    while a < len(arrivals) or running:
        next_arrival = arrivals[a][0] if a < len(arrivals) else float("inf")
        next_end = running[0][0] if running else float("inf")
        now = min(next_arrival, next_end)
        touched: set[str] = set()
        while running and running[0][0] <= now:
            _, _, plan = heapq.heappop(running)
            req = plan.klass.request_cpu * 1000
            cq_usage[plan.cluster_queue] -= req
            cohort_usage[plan.cohort] -= req
            last_finish = max(last_finish, now)
            touched.add(plan.cohort)
        while a < len(arrivals) and arrivals[a][0] <= now:
            created, index, plan = arrivals[a]
            heapq.heappush(pending[plan.cohort], (-plan.klass.priority, created, index, plan))
            touched.add(plan.cohort)
            a += 1
        for cohort in touched:
            queue = pending[cohort]
            if not queue:
                continue
            free = cohort_limit - cohort_usage[cohort]
            keep: list[tuple[int, float, int, WorkloadPlan]] = []
            smallest_blocked: int | None = None
            while queue:
                item = heapq.heappop(queue)
                plan = item[3]
                req = plan.klass.request_cpu * 1000
                if smallest_blocked is not None and free < 1000:
                    keep.append(item)  # nothing (1 CPU or more) can fit any more
                    continue
                if req <= free and cq_usage[plan.cluster_queue] + req <= cq_limit:
                    cq_usage[plan.cluster_queue] += req
                    cohort_usage[cohort] += req
                    free -= req
                    waits[plan.klass.name].append(now - item[1])
                    heapq.heappush(running, (now + plan.klass.runtime_ms / 1000.0, item[2], plan))
                else:
                    smallest_blocked = req
                    keep.append(item)
                    if strict:
                        keep.extend(queue)
                        queue.clear()
            for item in keep:
                heapq.heappush(queue, item)
    return IdealResult(wall=last_finish, waits=dict(waits), finish=last_finish)


if __name__ == "__main__":
    from bench.kueue_config import CONFIGS

    for name, config in CONFIGS.items():
        for at_start in (False, True):
            result = simulate_ideal(config, all_at_start=at_start)
            print(
                f"{name:12} all_at_start={at_start!s:5} wall {result.wall:6.1f} s "
                + " ".join(
                    f"{c.name} {result.avg_wait(c.name):5.1f} (max {result.max_wait(c.name):5.1f})"
                    for c in config.classes
                )
            )
