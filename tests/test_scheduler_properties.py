"""Property tests of the admission core: no limit is ever exceeded, StrictFIFO admits a prefix."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from shared.config import ConfigObject, parse_object
from shared.events import PodSet, WorkloadRef

V1 = "kueue.x-k8s.io/v1beta1"
FLAVORS = ("f1", "f2")
SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def resource_quota(draw: st.DrawFn) -> dict[str, Any]:
    nominal = draw(st.integers(0, 6))
    quota: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal}
    if draw(st.booleans()):
        quota["borrowingLimit"] = draw(st.integers(0, 6))
    if draw(st.booleans()):
        quota["lendingLimit"] = draw(st.integers(0, nominal))
    return quota


@st.composite
def tree_config(draw: st.DrawFn) -> list[ConfigObject]:
    """1-5 ClusterQueues over a flat or hierarchical set of cohorts, two cpu flavors."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": f}} for f in FLAVORS
    ]
    cohorts = ["c0", "c1", "c2"]
    hierarchical = draw(st.booleans())
    if hierarchical:
        for index, name in enumerate(cohorts):
            spec: dict[str, Any] = {}
            if index:
                spec["parentName"] = cohorts[draw(st.integers(0, index - 1))]
            if draw(st.booleans()):
                spec["resourceGroups"] = [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "f1", "resources": [draw(resource_quota())]}],
                    }
                ]
            documents.append(
                {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
            )
    for index in range(draw(st.integers(1, 5))):
        flavors = draw(st.lists(st.sampled_from(FLAVORS), min_size=1, max_size=2, unique=True))
        spec = {
            "namespaceSelector": {},
            "queueingStrategy": draw(st.sampled_from(["StrictFIFO", "BestEffortFIFO"])),
            "flavorFungibility": {
                "whenCanBorrow": draw(st.sampled_from(["MayStopSearch", "TryNextFlavor"]))
            },
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": f, "resources": [draw(resource_quota())]} for f in flavors
                    ],
                }
            ],
        }
        cohort = draw(st.sampled_from(["", *cohorts]))
        if cohort:
            spec["cohort"] = cohort
        documents.append(
            {
                "apiVersion": V1,
                "kind": "ClusterQueue",
                "metadata": {"name": f"cq{index}"},
                "spec": spec,
            }
        )
        documents.append(
            {
                "apiVersion": V1,
                "kind": "LocalQueue",
                "metadata": {"name": f"lq{index}", "namespace": "default"},
                "spec": {"clusterQueue": f"cq{index}"},
            }
        )
    return [parse_object(document) for document in documents]


def workload(index: int, queue: int, cpu: int, priority: int) -> QueuedWorkload:
    return QueuedWorkload(
        ref=WorkloadRef(namespace="default", name=f"w{index}", uid=f"u{index:04d}"),
        local_queue=f"lq{queue}",
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": cpu * 500})],
        queue_time=float(index % 7),
        priority=priority,
    )


_submit = st.tuples(st.just("submit"), st.integers(0, 4), st.integers(1, 8), st.integers(0, 3))
# Submits and passes dominate, so that quota is actually contended.
operation = st.one_of(
    _submit,
    _submit,
    _submit,
    st.tuples(st.just("schedule")),
    st.tuples(st.just("schedule")),
    st.tuples(st.just("finish"), st.integers(0, 1000)),
    st.tuples(st.just("evict"), st.integers(0, 1000)),
    st.tuples(st.just("delete"), st.integers(0, 1000)),
    st.tuples(st.just("config")),
)


def _check_bookkeeping(s: Scheduler) -> None:
    """Tree usage of each ClusterQueue equals the sum of its admitted workloads' usage."""
    expected: dict[str, dict[tuple[str, str], int]] = {}
    for view in s.workload_views():
        if view.state != "admitted":
            continue
        per_cq = expected.setdefault(view.cluster_queue, {})
        for assignment in view.assignments:
            for resource, value in assignment.usage.items():
                fr = (assignment.flavors[resource], resource)
                per_cq[fr] = per_cq.get(fr, 0) + value
    for name in s.quota.cluster_queues:
        assert s.quota.usage(name) == {k: v for k, v in expected.get(name, {}).items() if v}


@SETTINGS
@given(
    configs=st.lists(tree_config(), min_size=1, max_size=2),
    ops=st.lists(operation, min_size=10, max_size=40),
)
def test_no_limit_is_ever_exceeded(
    configs: list[list[ConfigObject]], ops: list[tuple[Any, ...]]
) -> None:
    """Under any sequence of events, scheduling never pushes usage past any limit in the tree."""
    s = Scheduler()
    s.set_config(configs[0])
    config_index = 0
    config_changed = False
    count = 0
    for op in ops:
        admitted = [v.ref for v in s.workload_views() if v.state == "admitted"]
        known = [v.ref for v in s.workload_views()]
        if op[0] == "submit":
            s.submit(workload(count, op[1], op[2], op[3]))
            count += 1
        elif op[0] == "schedule":
            before = s.quota.excess()
            decisions = s.schedule()
            after = s.quota.excess()
            for key, over in after.items():
                assert over <= before.get(key, 0), (key, over, before)
            assert all(isinstance(d, Admission) or d.reason for d in decisions)
        elif op[0] in ("finish", "evict") and admitted:
            target = admitted[op[1] % len(admitted)]
            (s.finish if op[0] == "finish" else s.evict)(target)
        elif op[0] == "delete" and known:
            s.delete(known[op[1] % len(known)])
        elif op[0] == "config" and len(configs) > 1:
            config_index = (config_index + 1) % len(configs)
            s.set_config(configs[config_index])
            config_changed = True
        if not config_changed:
            assert s.quota.violations() == []
        _check_bookkeeping(s)


@SETTINGS
@given(
    nominal=st.integers(0, 20),
    jobs=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3), st.integers(0, 5)), max_size=30),
)
def test_strict_fifo_admits_a_priority_ordered_prefix(
    nominal: int, jobs: list[tuple[int, int, int]]
) -> None:
    """StrictFIFO in one ClusterQueue admits exactly the longest fitting prefix of the order."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "f1"}},
        {
            "apiVersion": V1,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq0"},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "f1", "resources": [{"name": "cpu", "nominalQuota": nominal}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": V1,
            "kind": "LocalQueue",
            "metadata": {"name": "lq0", "namespace": "default"},
            "spec": {"clusterQueue": "cq0"},
        },
    ]
    s = Scheduler()
    s.set_config([parse_object(document) for document in documents])
    workloads = [workload(i, 0, cpu, priority) for i, (cpu, priority, _) in enumerate(jobs)]
    for w in workloads:
        s.submit(w)
    admitted = {d.ref.uid for d in s.schedule() if isinstance(d, Admission)}
    order = sorted(workloads, key=lambda w: (-(w.priority or 0), w.queue_time, w.ref.uid))
    used = 0
    expected: set[str] = set()
    for w in order:
        cpu = w.pod_sets[0].requests["cpu"]
        if used + cpu > nominal * 1000:
            break
        used += cpu
        expected.add(w.ref.uid)
    assert admitted == expected
    # Finishing everything admitted admits the next prefix, still in order.
    for w in workloads:
        if w.ref.uid in admitted:
            s.finish(w.ref)
    second = [d.ref.uid for d in s.schedule() if isinstance(d, Admission)]
    remaining = [w.ref.uid for w in order if w.ref.uid not in admitted]
    assert second == remaining[: len(second)]
