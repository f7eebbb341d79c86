"""services/admission/flavors.py: admitted workloads alike share one FlavorAssignment (kept
once), and one that differs in anything the assignment says, or is made under another
flavors' config, gets its own."""

from __future__ import annotations

import pytest

from services.admission.scheduler import Admission
from tests.scheduler_world import config, cq, flavor, group, lq, ref, scheduler, simple, wl

LABELLED = config(
    flavor("default-flavor", nodeLabels={"pool": "a"}),
    cq("cq", group(["cpu", "memory"], ("default-flavor", {"cpu": 4, "memory": "64Gi"}))),
    lq("user-queue", "cq"),
)

# (reason, second workload's count and cpu, a new config before its pass, shared, its labels)
CASES: list[tuple[str, int, str, bool, bool, dict[str, str]]] = [
    ("the same pod set, count and flavor: one assignment", 1, "1", False, True, {}),
    ("another count: its own", 2, "1", False, False, {}),
    ("another request: its own", 1, "2", False, False, {}),
    (
        "a new flavors' config: its own, with the new node labels",
        1,
        "1",
        True,
        False,
        {"pool": "a"},
    ),
]


@pytest.mark.parametrize(
    ("reason", "count", "cpu", "reconfigured", "shared", "labels"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_admissions_alike_share_one_assignment(
    reason: str, count: int, cpu: str, reconfigured: bool, shared: bool, labels: dict[str, str]
) -> None:
    s = scheduler(simple(cpu=4), wl("a", cpu="1"))
    (first,) = s.schedule()
    if reconfigured:
        s.set_config(LABELLED)
    s.submit(wl("b", count=count, cpu=cpu))
    (second,) = s.schedule()
    assert isinstance(first, Admission) and isinstance(second, Admission), reason
    a, b = first.assignments[0], second.assignments[0]
    assert (a is b) is shared, reason
    assert (b.count, b.usage["cpu"], b.node_labels) == (count, count * int(cpu) * 1000, labels)
    assert a.node_labels == {}, reason  # the first admission's is what it was


def test_a_shared_usage_is_released_for_one_only() -> None:
    """Two admissions alike share one usage dict; finishing one releases its quota alone:
    the other's usage, and the ClusterQueue's, stay what it holds."""
    s = scheduler(simple(cpu=4), wl("a", cpu="1"), wl("b", cpu="1"))
    first, second = s.schedule()
    assert isinstance(first, Admission) and isinstance(second, Admission)
    assert s.queue_stats().usage["cq"][("default-flavor", "cpu")] == 2000
    s.finish(ref("a"))
    assert s.queue_stats().usage["cq"][("default-flavor", "cpu")] == 1000
    s.submit(wl("c", cpu="1"))
    (third,) = s.schedule()
    assert isinstance(third, Admission)  # the room a left is free again, b's still held
    assert s.queue_stats().usage["cq"][("default-flavor", "cpu")] == 2000
