"""A workload whose pod sets each need room gets one preemption request for all of them
(services/admission/flavors.py), as Kueue's assignment carries every Preempt-mode pod set."""

from __future__ import annotations

from services.admission.scheduler import Admission, Inadmissible
from shared.events import PodSet
from tests.scheduler_world import config, cq, flavor, group, lq, scheduler, wl

GPU = "nvidia.com/gpu"


def test_every_pod_set_needing_room_is_in_one_request() -> None:
    """ "cpus" holds all the CPUs and "gpus" all the GPUs; "both" (higher priority) needs some
    of each: both flavor-resources are contested, with the whole workload's amounts."""
    objects = config(
        flavor("cpu-flavor"),
        flavor("gpu-flavor"),
        cq(
            "cq",
            group(["cpu"], ("cpu-flavor", {"cpu": 4})),
            group([GPU], ("gpu-flavor", {GPU: 2})),
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
        lq("q", "cq"),
    )
    s = scheduler(
        objects,
        wl("cpus", queue="q", priority=0, cpu=4),
        wl("gpus", queue="q", priority=0, pod_sets=[PodSet("main", 1, {GPU: 2000})]),
    )
    assert sorted(d.ref.name for d in s.schedule() if isinstance(d, Admission)) == [
        "cpus",
        "gpus",
    ]
    pod_sets = [
        PodSet(name="driver", count=1, requests={"cpu": 2000}),
        PodSet(name="workers", count=2, requests={"cpu": 1000, GPU: 1000}),
    ]
    s.submit(wl("both", queue="q", priority=10, pod_sets=pod_sets))
    [decision] = [d for d in s.schedule() if isinstance(d, Inadmissible)]
    assert decision.preemption_may_help
    assert sorted(decision.contested) == [("cpu-flavor", "cpu", 4000), ("gpu-flavor", GPU, 2000)]
    assert sorted(decision.preempt_flavors) == [
        ("driver", "cpu", "cpu-flavor"),
        ("workers", "cpu", "cpu-flavor"),
        ("workers", GPU, "gpu-flavor"),
    ]
    assert decision.message.startswith("couldn't assign flavors to pod set driver")
