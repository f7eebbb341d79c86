"""The pure admission core (services.admission.scheduler), one rule per test: a
workload's lifecycle (submit, evict, restore, delete, finish), statuses and views,
reservations, draining, nominations and shared failures."""

from __future__ import annotations

from services.admission.scheduler import Admission
from tests.scheduler_world import admitted, pending, ref, scheduler, simple, wl


def test_submit_is_idempotent() -> None:
    """A duplicate submit changes nothing."""
    s = scheduler(simple(cpu=1), wl("a", cpu="1"))
    s.submit(wl("a", cpu="1"))
    assert admitted(s.schedule()) == ["a"]
    s.submit(wl("a", cpu="1"))
    assert s.schedule() == []


def test_evict_keeps_queue_time_and_increments_generation() -> None:
    """Eviction keeps the original queue time; re-admission bumps the generation."""
    s = scheduler(
        simple(cpu=1, strategy="StrictFIFO"),
        wl("a", cpu="1", t=5),
        wl("b", cpu="1", t=1, priority=-1),
    )
    assert admitted(s.schedule()) == ["a"]
    assert s.generation(ref("a")) == 1
    s.evict(ref("a"))
    assert admitted(s.schedule()) == ["a"]
    assert s.generation(ref("a")) == 2


def test_restore_admission_is_idempotent_and_charges_quota() -> None:
    """A replayed admission charges quota once and emits nothing."""
    s = scheduler(simple(cpu=2))
    first = scheduler(simple(cpu=2), wl("a", cpu="2"))
    admission = first.schedule()[0]
    assert isinstance(admission, Admission)
    for _ in range(2):
        s.restore_admission(ref("a"), "cq", admission.assignments)
    s.submit(wl("a", cpu="2"))
    s.submit(wl("b", cpu="1", t=1))
    decisions = s.schedule()
    assert admitted(decisions) == [] and set(pending(decisions)) == {"b"}
    assert s.cluster_queue_status("cq")["admittedWorkloads"] == 1
    assert s.generation(ref("a")) == 1
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b"]


def test_restore_admission_replay_counts_generations() -> None:
    """Replaying admit, evict, admit yields generation 2; an explicit generation wins."""
    s = scheduler(simple(cpu=2), wl("a", cpu="1"))
    admission = s.schedule()[0]
    assert isinstance(admission, Admission)
    replay = scheduler(simple(cpu=2), wl("a", cpu="1"))
    replay.restore_admission(ref("a"), "cq", admission.assignments)
    replay.evict(ref("a"))
    replay.restore_admission(ref("a"), "cq", admission.assignments)
    assert replay.generation(ref("a")) == 2
    assert replay.schedule() == []
    replay.restore_admission(ref("a"), "cq", admission.assignments, generation=5)
    assert replay.generation(ref("a")) == 5


def test_delete_releases_quota_and_forgets() -> None:
    """delete releases an admitted workload's quota and drops pending ones."""
    s = scheduler(
        simple(cpu=1), wl("a", cpu="1", t=1), wl("b", cpu="1", t=2), wl("c", cpu="1", t=3)
    )
    s.schedule()
    s.delete(ref("b"))
    s.delete(ref("a"))
    assert admitted(s.schedule()) == ["c"]
    assert {v.ref.name for v in s.workload_views()} == {"c"}


def test_statuses_and_views() -> None:
    """ClusterQueue/LocalQueue status and workload views carry counts, usage and positions."""
    s = scheduler(
        simple(cpu=2),
        wl("a", cpu="2", memory="1Gi", t=1),
        wl("b", cpu="1", t=2),
        wl("c", cpu="1", t=3),
    )
    s.schedule()
    status = s.cluster_queue_status("cq")
    assert status["pendingWorkloads"] == 2 and status["admittedWorkloads"] == 1
    assert status["flavorsUsage"] == [
        {
            "name": "default-flavor",
            "resources": [
                {"name": "cpu", "total": "2", "borrowed": "0"},
                {"name": "memory", "total": "1Gi", "borrowed": "0"},
            ],
        }
    ]
    lq_status = s.local_queue_status("default", "user-queue")
    assert lq_status["pendingWorkloads"] == 2 and lq_status["admittedWorkloads"] == 1
    assert lq_status["flavorsUsage"][0]["resources"][1] == {"name": "memory", "total": "1Gi"}
    views = {v.ref.name: v for v in s.workload_views()}
    assert views["a"].state == "admitted" and views["a"].generation == 1
    assert (views["b"].position_in_cluster_queue, views["c"].position_in_local_queue) == (0, 1)
    assert views["b"].reason == "Pending"
    s.finish(ref("a"))
    assert {v.ref.name: v.state for v in s.workload_views()}["a"] == "finished"


def test_reservation_holds_released_quota_for_a_starving_workload() -> None:
    """A reserved workload goes first and, while it does not fit, small ones cannot pass it."""
    s = scheduler(simple(cpu=4), wl("running", cpu=3, t=0))
    assert admitted(s.schedule()) == ["running"]
    s.submit(wl("big", cpu=4, t=1))
    s.submit(wl("small", cpu=1, t=2, priority=5))
    assert admitted(s.schedule()) == ["small"]  # best effort: small passes the big one
    s.finish(ref("small"))
    s.set_boost(ref("big"), 0, reserved=True)
    s.submit(wl("small-2", cpu=1, t=3, priority=5))
    assert admitted(s.schedule()) == []  # held back: the reservation collects freed quota
    s.finish(ref("running"))
    assert admitted(s.schedule()) == ["big"]
    s.set_boost(ref("big"), 0, reserved=False)
    s.finish(ref("big"))
    assert admitted(s.schedule()) == ["small-2"]


def test_hold_and_drain_lists_admitted_workloads_for_eviction() -> None:
    """HoldAndDrain stops admission and names what the queue has admitted, with Kueue's reason."""
    s = scheduler(simple(cpu=4), wl("a", cpu=1, t=0), wl("b", cpu=1, t=1))
    assert admitted(s.schedule()) == ["a", "b"]
    assert s.draining() == []
    objects = simple(cpu=4, stopPolicy="HoldAndDrain")
    s.set_config(objects)
    assert sorted((r.name, cq, reason) for r, cq, reason in s.draining()) == [
        ("a", "cq", "ClusterQueueStopped"),
        ("b", "cq", "ClusterQueueStopped"),
    ]
    s.evict(ref("a"))
    s.submit(wl("c", cpu=1, t=2))
    assert admitted(s.schedule()) == []  # held: nothing new is admitted
    s.set_config(simple(cpu=4, stopPolicy="Hold"))
    assert s.draining() == []  # Hold lets admitted workloads run to completion


def test_nominated_preemptor_gets_the_room_its_victims_free() -> None:
    """Room freed by evicting a preemptor's victims goes to it, even before a reservation."""
    s = scheduler(simple(cpu=2), wl("victim", cpu=2, t=0, priority=1))
    assert admitted(s.schedule()) == ["victim"]
    s.submit(wl("starving", cpu=2, t=1, priority=1))
    s.set_boost(ref("starving"), 10, reserved=True)
    s.submit(wl("preemptor", cpu=2, t=2, priority=100))
    s.schedule()
    s.nominate(ref("preemptor"))
    s.evict(ref("victim"))
    assert admitted(s.schedule()) == ["preemptor"]


def test_a_nomination_that_still_does_not_fit_stops_blocking_when_it_ends() -> None:
    """A nominated preemptor holds its queue only while its victims leave."""
    s = scheduler(simple(cpu=4), wl("running", cpu=3, t=0))
    assert admitted(s.schedule()) == ["running"]
    s.submit(wl("preemptor", cpu=4, t=1, priority=100))
    s.submit(wl("small", cpu=1, t=2))
    s.nominate(ref("preemptor"))
    assert admitted(s.schedule()) == []  # its room is coming: nothing else takes it
    s.unnominate(ref("preemptor"))
    assert admitted(s.schedule()) == ["small"]  # best effort again


def test_same_shaped_workloads_share_a_failure_until_usage_changes() -> None:
    """Scheduling equivalence: identical workloads are judged once per usage state; a
    later one, after an admission changed the usage, gets its own (current) numbers."""
    s = scheduler(
        simple(cpu=10),
        wl("running", cpu="8", t=0, priority=100),
        wl("b1", cpu="4", t=1, priority=10),
        wl("b2", cpu="4", t=2, priority=10),
        wl("d", cpu="1", t=3, priority=5),
        wl("c", cpu="4", t=4, priority=1),
    )
    decisions = s.schedule()
    assert admitted(decisions) == ["running", "d"]
    reasons = pending(decisions)
    assert "2 more needed" in reasons["b1"].message
    assert reasons["b2"].message == reasons["b1"].message
    assert "3 more needed" in reasons["c"].message
