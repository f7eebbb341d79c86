"""What tests/test_victims_*.py share: the builders of ClusterQueues, Cohorts, running
workloads and preemptors, the search run on both quota trees (services.preemption.victims
against Kueue's classical and fair-sharing preemption semantics), and the generated worlds
the property tests draw.

Other preemption tests (tests/test_preemption_*.py, test_ageing_tick.py) build their queues
with these too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from services.preemption.borrowing import BorrowingTree
from services.preemption.ordering import RunningOf
from services.preemption.victims import Preemptor, Running, SearchResult, find_victims
from shared.config import ClusterQueue, Cohort, FairSharingSettings, parse_object
from shared.events import WorkloadRef
from shared.quota import FlavorResource, QuotaTree

V1 = "kueue.x-k8s.io/v1beta1"
Quota = int | tuple[int, int | None, int | None]  # nominal, or (nominal, borrowing, lending)


# --- builders --------------------------------------------------------------------------------


def _groups(quotas: Mapping[str, Quota]) -> list[dict[str, Any]]:
    """One resource group per flavor; quotas keyed "flavor/resource", in whole units."""
    by_flavor: dict[str, list[dict[str, Any]]] = {}
    for key, quota in quotas.items():
        flavor, resource = key.split("/", 1)
        nominal, borrowing, lending = quota if isinstance(quota, tuple) else (quota, None, None)
        entry: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
        if borrowing is not None:
            entry["borrowingLimit"] = borrowing
        if lending is not None:
            entry["lendingLimit"] = lending
        by_flavor.setdefault(flavor, []).append(entry)
    return [
        {
            "coveredResources": [r["name"] for r in resources],
            "flavors": [{"name": f, "resources": resources}],
        }
        for f, resources in by_flavor.items()
    ]


def cq(
    name: str,
    quotas: Mapping[str, Quota],
    cohort: str = "",
    within: str = "Never",
    reclaim: str = "Never",
    borrow: int | str | None = "Never",
    weight: str | None = None,
) -> ClusterQueue:
    """A ClusterQueue; ``borrow`` is "Never", or borrowWithinCohort LowerPriority with that
    maxPriorityThreshold (None: no threshold)."""
    preemption: dict[str, Any] = {"withinClusterQueue": within, "reclaimWithinCohort": reclaim}
    if borrow != "Never":
        preemption["borrowWithinCohort"] = {"policy": "LowerPriority"}
        if borrow is not None:
            preemption["borrowWithinCohort"]["maxPriorityThreshold"] = borrow
    spec: dict[str, Any] = {"resourceGroups": _groups(quotas), "preemption": preemption}
    if cohort:
        spec["cohort"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    obj = parse_object(
        {"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    )
    assert isinstance(obj, ClusterQueue)
    return obj


def cohort(name: str, parent: str = "", quotas: Mapping[str, Quota] | None = None) -> Cohort:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = _groups(quotas)
    obj = parse_object(
        {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    )
    assert isinstance(obj, Cohort)
    return obj


def _usage(units: Mapping[str, int]) -> dict[FlavorResource, int]:
    result: dict[FlavorResource, int] = {}
    for key, value in units.items():
        flavor, resource = key.split("/", 1)
        result[(flavor, resource)] = value * 1000
    return result


def run(
    name: str,
    queue: str,
    priority: int,
    usage: Mapping[str, int],
    admitted: float = 0.0,
    created: float = 0.0,
    evicting: bool = False,
    preemptions: int = 0,
) -> Running:
    return Running(
        ref=WorkloadRef("ns", name, name),
        cluster_queue=queue,
        priority=priority,
        queue_time=created,
        admitted_at=admitted,
        usage=_usage(usage),
        evicting=evicting,
        preemptions=preemptions,
    )


def wants(queue: str, priority: int, needs: Mapping[str, int], created: float = 100.0) -> Preemptor:
    return Preemptor(
        WorkloadRef("ns", "preemptor", "preemptor"), queue, priority, created, _usage(needs)
    )


def snapshot(tree: QuotaTree) -> dict[str, dict[FlavorResource, int]]:
    nodes = {**tree.cluster_queues, **{f"cohort:{k}": v for k, v in tree.cohorts.items()}}
    return {name: {fr: v for fr, v in node.usage.items() if v} for name, node in nodes.items()}


def by_queue(running: Sequence[Running]) -> RunningOf:
    """``running`` one ClusterQueue at a time, the form the search takes (Cluster.choosable)."""
    of: dict[str, list[Running]] = {}
    for w in running:
        of.setdefault(w.cluster_queue, []).append(w)
    return lambda queue: of.get(queue, ())


def search(
    queues: Sequence[ClusterQueue],
    running: Sequence[Running],
    preemptor: Preemptor,
    cohorts: Sequence[Cohort] = (),
    protected: frozenset[str] = frozenset(),
    fair: FairSharingSettings | None = None,
) -> SearchResult:
    """Run the search on a tree charged with ``running``, checking the tree comes back intact;
    on preemption's own tree too (its index of borrowing queues), which must answer alike."""
    results = []
    for build in (QuotaTree.build, BorrowingTree.build):
        tree = build(queues, cohorts)
        for w in running:
            tree.add_usage(w.cluster_queue, w.usage)
        before = snapshot(tree)
        results.append(
            find_victims(
                tree=tree,
                cluster_queues={q.metadata.name: q for q in queues},
                preemptor=preemptor,
                running=by_queue(running),
                protected=lambda w: w.ref.name in protected,
                fair_sharing=fair,
            )
        )
        assert snapshot(tree) == before
    assert results[0] == results[1]
    return results[0]


def victims_of(result: SearchResult) -> dict[str, str]:
    return {v.workload.ref.name: v.reason for v in result.victims}


# --- shared by the table and the property tests -------------------------------------------

F = "f/cpu"
FAIR = FairSharingSettings(enable=True)
S2A_ONLY = FairSharingSettings(enable=True, preemption_strategies=["LessThanOrEqualToFinalShare"])


# --- generated worlds (the property tests) --------------------------------------------------

# Biased towards policies that preempt, so that most examples exercise a search.
POLICIES_WITHIN = ["Never", "LowerPriority", "LowerOrNewerEqualPriority", "LowerPriority"]
POLICIES_RECLAIM = ["Never", "LowerPriority", "Any", "Any"]


# A generated world: queues, cohorts, running workloads, the preemptor, the protected
# workloads' uids and the fair-sharing settings.
World = tuple[
    list[ClusterQueue],
    list[Cohort],
    list[Running],
    Preemptor,
    frozenset[str],
    FairSharingSettings | None,
]


@st.composite
def worlds(
    draw: st.DrawFn,
) -> World:
    flavors = ["f", "g"][: draw(st.integers(1, 2))]
    hierarchical = draw(st.booleans())
    cohorts = [cohort("root"), cohort("x", "root"), cohort("y", "root")] if hierarchical else []
    queues: list[ClusterQueue] = []
    for i in range(draw(st.integers(1, 4))):
        quotas: dict[str, Quota] = {}
        for flavor in flavors:
            nominal = draw(st.integers(0, 6))
            borrowing = draw(st.one_of(st.none(), st.integers(0, 6)))
            lending = draw(st.one_of(st.none(), st.integers(0, nominal)))
            quotas[f"{flavor}/cpu"] = (nominal, borrowing, lending)
        parent = draw(st.sampled_from(["x", "y", "root"] if hierarchical else ["c", "c", ""]))
        borrow = draw(st.sampled_from(["Never", None, 0, 5, 10]))
        queues.append(
            cq(
                f"q{i}",
                quotas,
                parent,
                within=draw(st.sampled_from(POLICIES_WITHIN)),
                reclaim=draw(st.sampled_from(POLICIES_RECLAIM)),
                borrow=borrow,
                weight=draw(st.sampled_from([None, "1", "2", "500m", "0"])),
            )
        )
    names = [q.metadata.name for q in queues]
    tree = QuotaTree.build(queues, cohorts)
    running: list[Running] = []
    for j in range(draw(st.integers(2, 16))):
        queue = draw(st.sampled_from(names))
        usage = {f"{flavor}/cpu": draw(st.integers(0, 3)) for flavor in flavors}
        w = run(
            f"w{j}",
            queue,
            draw(st.integers(0, 8)),
            usage,
            admitted=draw(st.integers(0, 5)),
            created=draw(st.integers(0, 5)),
            evicting=draw(st.booleans()),
            preemptions=draw(st.integers(0, 2)),
        )
        if any(w.usage.values()) and tree.fits(queue, w.usage):
            tree.add_usage(queue, w.usage)
            running.append(w)
    queue = draw(st.sampled_from(names))
    # Needs within what the queue could ever get: admission only asks when preemption may help.
    needs = {
        f"{flavor}/cpu": draw(
            st.integers(1, max(1, tree.potential_available(queue, flavor, "cpu") // 1000))
        )
        for flavor in flavors
    }
    preemptor = wants(queue, draw(st.integers(4, 12)), needs, created=draw(st.integers(0, 5)))
    protected = frozenset(
        w.ref.name for w in running if draw(st.booleans()) and draw(st.booleans())
    )
    fair = draw(st.sampled_from([None, FAIR, S2A_ONLY]))
    return queues, cohorts, running, preemptor, protected, fair
