"""Partial admission: a workload whose pod sets have a ``min_count`` may run with fewer pods.

Kueue (``PartialAdmission``, on by default) first tries the full counts; only when they neither
fit nor can be made to fit by preemption does it walk every variable pod set down together from
its count towards its ``min_count`` and take the largest counts that do. The walk is a binary
search over one index ``i`` in ``0..total_delta`` (the sum of ``count - min_count``): pod set
``k`` gets ``count_k - delta_k * i // total_delta``, so all pod sets shrink in proportion to
their slack (Kueue's ``PodSetReducer``). Admission carries the granted counts in each
``FlavorAssignment.count``; the watcher runs that many pods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from msgspec.structs import replace

from services.admission.flavors import (
    AssignResult,
    ClusterQueueInfo,
    FlavorInfo,
    assign_flavors,
)
from shared.events import PodSet
from shared.quota import QuotaTree

__all__ = ["assign", "can_be_partial", "reduced", "search"]


def assign(
    info: ClusterQueueInfo,
    flavors: dict[str, FlavorInfo],
    tree: QuotaTree,
    pod_sets: list[PodSet],
    *,
    victims_possible: bool = True,
) -> AssignResult:
    """Kueue's initial assignment: the full counts if they fit, or if preemption may make
    them fit; else the largest partial counts that fit or that preemption may make fit; else
    the full counts' result (why the workload waits).

    "Preemption may make them fit" is Kueue's "the preemptor found targets". Admission does
    not search victims (the preemption service does), so it takes the policy's word until
    preemption has said it cannot help this workload (``victims_possible`` false): from then
    on only counts that fit now are taken, as Kueue takes them when it finds no targets.
    """
    full = assign_flavors(info, flavors, tree, pod_sets)
    if full.fits or not can_be_partial(pod_sets):
        return full
    if full.preemption_may_help and victims_possible:
        return full

    def accept(counts: list[PodSet]) -> AssignResult | None:
        result = assign_flavors(info, flavors, tree, counts)
        if result.fits or (result.preemption_may_help and victims_possible):
            return result
        return None

    partial = search(pod_sets, accept)
    if partial is not None:
        return partial
    # Why even the fewest pods wait, beside why the full count does: the user set a minimum.
    fewest = reduced(pod_sets, 1, 1)
    smallest = ", ".join(f"{p.name}: {p.count}" for p in fewest if p.min_count is not None)
    reason = assign_flavors(info, flavors, tree, fewest).message
    return dataclasses.replace(
        full, message=f"{full.message}; at its minimum ({smallest}): {reason}"
    )


def can_be_partial(pod_sets: list[PodSet]) -> bool:
    """Some pod set may run with fewer pods than its count."""
    return any(p.min_count is not None and p.min_count < p.count for p in pod_sets)


def reduced(pod_sets: list[PodSet], index: int, total: int) -> list[PodSet]:
    """The pod sets at search ``index`` of ``total``: each variable one lowered by its share
    (Go's truncating integer arithmetic, so the counts match Kueue's exactly)."""
    out = []
    for pod_set in pod_sets:
        count = pod_set.count - _slack(pod_set) * index // total
        out.append(pod_set if count == pod_set.count else replace(pod_set, count=count))
    return out


def _slack(pod_set: PodSet) -> int:
    return 0 if pod_set.min_count is None else pod_set.count - pod_set.min_count


def search(
    pod_sets: list[PodSet], accept: Callable[[list[PodSet]], AssignResult | None]
) -> AssignResult | None:
    """The result for the largest counts ``accept`` takes, or None if even the minimum fails.

    Kueue's ``sort.Search``: the smallest index (largest counts) for which ``accept`` holds,
    assuming that fewer pods never fit worse.
    """
    total = sum(_slack(p) for p in pod_sets)
    if total <= 0:
        return None
    low, high = 0, total + 1  # the answer is in [low, high); high means "none"
    best: tuple[int, AssignResult] | None = None
    while low < high:
        middle = (low + high) // 2
        result = accept(reduced(pod_sets, middle, total))
        if result is not None:
            best = (middle, result)
            high = middle
        else:
            low = middle + 1
    return best[1] if best is not None and best[0] == low else None
