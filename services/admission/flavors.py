"""Flavor assignment: which ResourceFlavor each pod set's resources land on, or why none fits.

Follows Kueue's ``flavorassigner``: resource groups and flavors are tried in the
ClusterQueue's order; a flavor fits when every resource of the group fits in
``available`` (borrowing included); ``flavorFungibility`` decides whether to stop at a flavor
that must borrow or preempt, or to look further for a better one. Messages carry numbers, as
Kueue's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from services.admission.interning import kept_once
from shared.config import ClusterQueue, LabelSelector, ResourceFlavor, Taint
from shared.config import Toleration as ConfigToleration
from shared.events import FlavorAssignment, PodSet, Toleration
from shared.hierarchy import may_reclaim_in_hierarchy
from shared.quantities import format_quantity, is_binary_resource
from shared.quota import (
    FlavorResource,
    QuotaNode,
    QuotaTree,
    available_at,
    potential_available,
)

__all__ = [
    "AssignResult",
    "ClusterQueueInfo",
    "FlavorInfo",
    "PodSetsShape",
    "assign_flavors",
    "fmt_quantity",
    "pod_sets_shape",
]

# Flavor modes, worst to best. _WAIT: it fits the quota's limits but not what is unused now,
# and preemption cannot help (it must wait for room); _NO_FIT: it exceeds what could ever be.
_encode = msgspec.json.Encoder().encode

_NO_FIT, _WAIT, _PREEMPT, _FIT_BORROW, _FIT = 0, 1, 2, 3, 4


# Each quantity as a message shows it, by (resource, milli-units): failures' messages repeat
# the few amounts a backlog asks and misses (the table starts over at TABLE_LIMIT).
_FORMATTED: dict[tuple[str, int], str] = {}


def fmt_quantity(resource: str, milli: int) -> str:
    """``milli`` of ``resource`` as a message shows it (format_quantity, binary suffixes for
    a binary resource), formatted once per (resource, amount)."""
    key = (resource, milli)
    text = _FORMATTED.get(key)
    if text is None:
        text = kept_once(
            _FORMATTED, key, lambda: format_quantity(milli, binary=is_binary_resource(resource))
        )
    return text


def _tolerates(toleration: ConfigToleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


@dataclass(frozen=True, slots=True)
class FlavorInfo:
    """What the assigner needs of a ResourceFlavor, precomputed once per config."""

    name: str
    node_labels: dict[str, str]
    tolerations: tuple[Toleration, ...]
    # A NoSchedule/NoExecute taint the flavor's own tolerations do not cover: pods (which
    # carry no tolerations in Berth's PodSet) could never land there.
    untolerated_taint: str | None

    @classmethod
    def from_config(cls, flavor: ResourceFlavor) -> FlavorInfo:
        spec = flavor.spec
        untolerated = None
        for taint in spec.node_taints:
            if taint.effect == "PreferNoSchedule":
                continue
            if not any(_tolerates(toleration, taint) for toleration in spec.tolerations):
                value = f"={taint.value}" if taint.value else ""
                untolerated = f"{taint.key}{value}:{taint.effect}"
                break
        return cls(
            name=flavor.metadata.name,
            node_labels=dict(spec.node_labels),
            tolerations=tuple(
                Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
                for t in spec.tolerations
            ),
            untolerated_taint=untolerated,
        )


@dataclass(slots=True)
class ClusterQueueInfo:
    """A ClusterQueue's spec, digested for the scheduler's hot path."""

    name: str
    cohort: str
    strict_fifo: bool
    namespace_selector: LabelSelector | None
    stopped: bool
    groups: list[tuple[str, ...]]  # flavors, in order, per resource group
    covered: list[tuple[str, ...]]  # covered resources, per resource group
    group_of: dict[str, int]  # resource -> index into groups
    when_can_borrow: str
    when_can_preempt: str
    within_cluster_queue: str
    reclaim_within_cohort: str
    borrow_within_cohort: str
    missing_flavors: list[str] = field(default_factory=list)
    flavor_order: list[str] = field(default_factory=list)  # all flavors, for status
    # The node its capacities were read from, and them (see capacity).
    capacities: tuple[QuotaNode, dict[FlavorResource, int]] | None = field(
        default=None, compare=False, repr=False
    )

    @classmethod
    def from_config(cls, cq: ClusterQueue, flavors: dict[str, FlavorInfo]) -> ClusterQueueInfo:
        spec = cq.spec
        groups: list[tuple[str, ...]] = []
        group_of: dict[str, int] = {}
        order: list[str] = []
        for index, group in enumerate(spec.resource_groups):
            groups.append(tuple(flavor.name for flavor in group.flavors))
            for resource in group.covered_resources:
                group_of.setdefault(resource, index)
            order.extend(f.name for f in group.flavors if f.name not in order)
        return cls(
            name=cq.metadata.name,
            cohort=cq.cohort_name,
            strict_fifo=spec.queueing_strategy == "StrictFIFO",
            namespace_selector=spec.namespace_selector,
            stopped=spec.stop_policy != "None",
            groups=groups,
            covered=[tuple(group.covered_resources) for group in spec.resource_groups],
            group_of=group_of,
            when_can_borrow=spec.flavor_fungibility.when_can_borrow,
            when_can_preempt=spec.flavor_fungibility.when_can_preempt,
            within_cluster_queue=spec.preemption.within_cluster_queue,
            reclaim_within_cohort=spec.preemption.reclaim_within_cohort,
            borrow_within_cohort=spec.preemption.borrow_within_cohort.policy,
            missing_flavors=sorted(name for name in order if name not in flavors),
            flavor_order=order,
        )

    def capacity(self, node: QuotaNode, fr: FlavorResource) -> int:
        """``potential_available(node, fr)`` of its ClusterQueue's ``node``, read once per
        node and pair: it reads quotas and subtrees only, which never change in a tree
        (a new configuration is a new tree, and a node of it another object)."""
        capacities = self.capacities
        if capacities is None or capacities[0] is not node:
            capacities = self.capacities = (node, {})
        known = capacities[1].get(fr)
        if known is None:
            known = capacities[1][fr] = potential_available(node, fr)
        return known

    def preemption_could_help(self, nominal: int, needed: int, in_cohort: bool) -> bool:
        """Whether this CQ's preemption policy could ever free ``needed`` (Kueue's gate)."""
        within_nominal = needed <= nominal
        if within_nominal and self.within_cluster_queue != "Never":
            return True
        if in_cohort and within_nominal and self.reclaim_within_cohort != "Never":
            return True
        return in_cohort and self.borrow_within_cohort != "Never"


@dataclass(slots=True)
class AssignResult:
    """The outcome of one flavor assignment for a whole workload."""

    fits: bool
    assignments: list[FlavorAssignment]
    usage: dict[FlavorResource, int]
    borrows: bool = False
    message: str = ""
    preemption_may_help: bool = False
    # (pod set, resource, flavor) that would need preemption, for the preemption service.
    preempt_flavors: tuple[tuple[str, str, str], ...] = ()
    # (flavor, resource, amount) the workload needs where only preemption can make room.
    contested: tuple[tuple[str, str, int], ...] = ()
    # It does not fit only for lack of unused quota: released quota could admit it.
    waits_for_room: bool = False


PodSetsShape = bytes


def pod_sets_shape(pod_sets: list[PodSet]) -> PodSetsShape:
    """Everything of the pod sets that ``assign_flavors`` reads, as a hashable key (their
    JSON: one C call, where building nested tuples cost a third of a first pass)."""
    return _encode(pod_sets)


def assign_flavors(
    info: ClusterQueueInfo,
    flavors: dict[str, FlavorInfo],
    tree: QuotaTree,
    pod_sets: list[PodSet],
) -> AssignResult:
    """Assign a flavor to every resource of every pod set, or say why that is impossible."""
    acc: dict[FlavorResource, int] = {}  # what earlier pod sets of this workload took
    assignments: list[FlavorAssignment] = []
    borrows = False
    # Pod sets that fit only if preemption makes room: (first one's result, flavor-resources).
    preempting: tuple[AssignResult, list[FlavorResource]] | None = None
    for pod_set in pod_sets:
        totals = {r: q * pod_set.count for r, q in pod_set.requests.items() if q}
        chosen: dict[str, str] = {}
        for resource in totals:
            if resource in chosen:
                continue
            group = info.group_of.get(resource)
            if group is None:
                return _fail(pod_set, [f"resource {resource} unavailable in ClusterQueue"], acc)
            group_resources = [r for r in totals if info.group_of.get(r) == group]
            best: str | None = None
            best_mode = _NO_FIT
            reasons: list[str] = []
            preempt_flavor: str | None = None
            for flavor in info.groups[group]:
                flavor_info = flavors.get(flavor)
                if flavor_info is None:
                    reasons.append(f"flavor {flavor} not found")
                    continue
                if flavor_info.untolerated_taint is not None:
                    reasons.append(
                        f"untolerated taint {flavor_info.untolerated_taint} in flavor {flavor}"
                    )
                    continue
                mode = _flavor_mode(info, tree, flavor, group_resources, totals, acc, reasons)
                if mode > best_mode:
                    best, best_mode = flavor, mode
                if mode == _PREEMPT and preempt_flavor is None:
                    preempt_flavor = flavor
                if mode == _FIT:
                    break
                if mode == _FIT_BORROW and info.when_can_borrow != "TryNextFlavor":
                    break
                if mode == _PREEMPT and info.when_can_preempt != "TryNextFlavor":
                    break
            if best_mode == _PREEMPT and preempt_flavor is not None:
                # Kueue assigns the flavor in Preempt mode and goes on with the next pod
                # sets: a workload that needs room for several gets all its victims at once.
                if preempting is None:
                    preempting = (_fail(pod_set, reasons, acc), [])
                preempting[0].preempt_flavors += tuple(
                    (pod_set.name, r, preempt_flavor) for r in group_resources
                )
                preempting[1].extend((preempt_flavor, r) for r in group_resources)
                best = preempt_flavor
            elif best is None or best_mode < _FIT_BORROW:
                result = _fail(pod_set, reasons, acc)
                result.waits_for_room = best_mode in (_WAIT, _PREEMPT)
                return result
            borrows = borrows or best_mode == _FIT_BORROW
            for r in group_resources:
                chosen[r] = best
                fr = (best, r)
                acc[fr] = acc.get(fr, 0) + totals[r]
        assignments.append(_assignment(pod_set, totals, chosen, flavors))
    if preempting is not None:
        result, contested = preempting
        result.waits_for_room = result.preemption_may_help = True
        # The whole workload's need on each contested flavor-resource, every pod set's.
        result.contested = tuple((f, r, acc[(f, r)]) for f, r in dict.fromkeys(contested))
        return result
    usage = kept_once(_USAGES, tuple(acc.items()), lambda: acc)  # an admitted record's
    # Its assignments are each kept once, so one list of them serves every workload alike;
    # keyed by their ids, which the kept list's own references keep from being reused.
    kept = kept_once(_ASSIGNMENT_LISTS, tuple(map(id, assignments)), lambda: assignments)
    return AssignResult(True, kept, usage, borrows=borrows)


def _flavor_mode(
    info: ClusterQueueInfo,
    tree: QuotaTree,
    flavor: str,
    resources: list[str],
    totals: dict[str, int],
    acc: dict[FlavorResource, int],
    reasons: list[str],
) -> int:
    """The worst mode over the group's resources on this flavor; appends why it falls short."""
    node = tree.cluster_queues[info.name]  # the tree's lookups by name spared below
    mode = _FIT
    for resource in resources:
        fr = (flavor, resource)
        value = acc.get(fr, 0) + totals[resource]
        capacity = info.capacity(node, fr)
        if value > capacity:
            reasons.append(
                f"insufficient quota for {resource} in flavor {flavor}, request > maximum"
                f" capacity ({fmt_quantity(resource, value)} > {fmt_quantity(resource, capacity)})"
            )
            return _NO_FIT
        available = available_at(node, fr)
        if value <= available:
            if node.usage.get(fr, 0) + value > node.subtree.get(fr, 0):
                mode = min(mode, _FIT_BORROW)
            continue
        reasons.append(
            f"insufficient unused quota for {resource} in flavor {flavor},"
            f" {fmt_quantity(resource, value - available)} more needed"
        )
        quota = node.quotas.get(fr)
        nominal = 0 if quota is None else quota.nominal
        if info.preemption_could_help(nominal, value, node.parent is not None) or (
            # Room inside a sub-cohort that others borrowed is reclaimed at any priority.
            info.reclaim_within_cohort != "Never" and may_reclaim_in_hierarchy(node, fr, value)
        ):
            mode = min(mode, _PREEMPT)
        else:
            mode = min(mode, _WAIT)
    return mode


def _fail(pod_set: PodSet, reasons: list[str], acc: dict[FlavorResource, int]) -> AssignResult:
    message = f"couldn't assign flavors to pod set {pod_set.name}: {', '.join(sorted(reasons))}"
    return AssignResult(False, [], acc, message=message)


# One FlavorAssignment per distinct (pod set, count, usage, flavors chosen, flavors' config):
# admitted workloads alike share it (it is frozen and its dicts only read). The config's
# flavors dict is kept with it, so no later config can take its id while it is kept.
_ASSIGNMENTS: dict[tuple[object, ...], tuple[dict[str, FlavorInfo], FlavorAssignment]] = {}
# And one usage dict per distinct usage, in the same order (admitted records keep it; the
# tree, the books and the ledger only read it).
_USAGES: dict[tuple[tuple[FlavorResource, int], ...], dict[FlavorResource, int]] = {}
# And one list of assignments per distinct list of kept ones (admitted records and their
# events keep it; nothing writes to it).
_ASSIGNMENT_LISTS: dict[tuple[int, ...], list[FlavorAssignment]] = {}


def _assignment(
    pod_set: PodSet, totals: dict[str, int], chosen: dict[str, str], flavors: dict[str, FlavorInfo]
) -> FlavorAssignment:
    """The assignment of ``pod_set`` to the ``chosen`` flavors, kept once (_ASSIGNMENTS)."""
    key = (pod_set.name, pod_set.count, *totals.items(), None, *chosen.items(), id(flavors))
    return kept_once(
        _ASSIGNMENTS, key, lambda: (flavors, _new_assignment(pod_set, totals, chosen, flavors))
    )[1]


def _new_assignment(
    pod_set: PodSet, totals: dict[str, int], chosen: dict[str, str], flavors: dict[str, FlavorInfo]
) -> FlavorAssignment:
    labels: dict[str, str] = {}
    tolerations: list[Toleration] = []
    for name in dict.fromkeys(chosen.values()):
        info = flavors[name]
        labels.update(info.node_labels)
        tolerations.extend(t for t in info.tolerations if t not in tolerations)
    return FlavorAssignment(
        pod_set=pod_set.name,
        count=pod_set.count,
        flavors=chosen,
        usage=totals,
        node_labels=labels,
        tolerations=tolerations,
    )
