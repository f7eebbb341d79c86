"""Admission fair sharing (services.admission.admission_fair_sharing, fair_queues).

The decay and the usage are Kueue's formulas (pkg/util/admissionfairsharing); the ordering
cases replay Kueue's TestScheduleForAFS (pkg/scheduler/scheduler_afs_test.go, named in the
ids) on the ClusterQueue's pending queue.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest

from services.admission.admission_fair_sharing import Ledger, decayed, weighted_usage
from services.admission.fair_queues import FairShareQueue
from services.admission.model import QueuedWorkload
from services.admission.queues import Record, order_key
from services.admission.scheduler import Admission, Scheduler
from services.admission.service import AdmissionService
from shared.config_fairness import AdmissionFairSharingSettings
from shared.events import (
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.service import Runtime
from tests.scheduler_world import admitted, config, cq, flavor, group, ref, wl
from tests.scheduler_world import lq as local_queue

DECAY = [
    ("one half-life: half the old, half the new", {"cpu": 8.0}, {"cpu": 0.0}, 10, 10, 4.0),
    ("two half-lives: a quarter of the old is left", {"cpu": 8.0}, {}, 20, 10, 2.0),
    ("no time passed: nothing changes", {"cpu": 8.0}, {"cpu": 2.0}, 0, 10, 8.0),
    ("a half-life of 0 forgets the past at once", {"cpu": 8.0}, {"cpu": 2.0}, 1, 0, 2.0),
    ("the average moves toward what runs now", {}, {"cpu": 4.0}, 10, 10, 2.0),
]


@pytest.mark.parametrize(
    ("why", "old", "new", "elapsed", "half_life", "cpu"), DECAY, ids=[d[0] for d in DECAY]
)
def test_consumption_decays_with_the_half_life(
    why: str,
    old: dict[str, float],
    new: dict[str, float],
    elapsed: float,
    half_life: float,
    cpu: float,
) -> None:
    """Kueue's CalculateDecayedConsumed."""
    assert decayed(old, new, elapsed, half_life)["cpu"] == pytest.approx(cpu), why


USAGE = [
    ("resources add up with weight 1 each", {"cpu": 2.0, "memory": 3.0}, 1.0, {}, 5.0),
    ("resourceWeights scale each resource", {"cpu": 2.0, "gpu": 1.0}, 1.0, {"gpu": 10.0}, 12.0),
    ("the LocalQueue's weight divides the sum", {"cpu": 6.0}, 3.0, {}, 2.0),
    ("weight 0 goes last even with no usage", {}, 0.0, {}, math.inf),
]


@pytest.mark.parametrize(
    ("why", "consumed", "weight", "resource_weights", "usage"), USAGE, ids=[u[0] for u in USAGE]
)
def test_weighted_usage(
    why: str,
    consumed: dict[str, float],
    weight: float,
    resource_weights: dict[str, float],
    usage: float,
) -> None:
    """Kueue's CalculateUsage, zero weights last (its fix for 0/0 sorting first)."""
    assert weighted_usage(consumed, weight, resource_weights) == usage, why


SETTINGS = AdmissionFairSharingSettings(usage_half_life_time="10s", usage_sampling_interval="1s")


def test_an_admission_charges_the_entry_penalty_then_decays_toward_what_runs() -> None:
    """An admission adds its requests times one sampling interval's share at once; then the
    average moves toward the admitted usage, and back to 0 once it ends."""
    ledger = Ledger(SETTINGS)
    lq = ("team", "lq-a")
    ledger.admitted(lq, {("default", "cpu"): 8000}, 1, now=100.0)
    penalty = 8 * (1 - 0.5 ** (1 / 10))
    assert ledger.consumed(lq, now=100.0)["cpu"] == pytest.approx(penalty)
    assert ledger.consumed(lq, now=110.0)["cpu"] == pytest.approx(penalty / 2 + 4)
    ledger.admitted(lq, {("default", "cpu"): 8000}, -1, now=110.0)
    assert ledger.consumed(lq, now=120.0)["cpu"] == pytest.approx((penalty / 2 + 4) / 2)


PENALTY = 8 * (1 - 0.5 ** (1 / 10))  # an 8-CPU admission's entry penalty (SETTINGS)
OUT_OF_ORDER = [
    (
        "in time order: 8 CPUs run from 100 to 110, then 10 s of nothing",
        [(1, 100.0), (-1, 110.0)],
        (PENALTY / 2 + 4) / 2,
    ),
    (
        "an end stamped 100 folded after a start at 110 (a batch sent again after a failover):"
        " the step back is no time, and time then counts from 110, not from 100",
        [(1, 110.0), (-1, 100.0)],
        PENALTY / 2,
    ),
]


@pytest.mark.parametrize(
    ("why", "folds", "cpu"), OUT_OF_ORDER, ids=[c[0][:60] for c in OUT_OF_ORDER]
)
def test_a_step_back_in_time_counts_as_no_time(
    why: str, folds: list[tuple[int, float]], cpu: float
) -> None:
    ledger = Ledger(SETTINGS)
    lq = ("team", "lq-a")
    for sign, now in folds:
        ledger.admitted(lq, {("default", "cpu"): 8000}, sign, now=now)
    assert ledger.consumed(lq, now=120.0)["cpu"] == pytest.approx(cpu), why


def _record(name: str, lq: str, t: float) -> Record:
    wl = QueuedWorkload(
        ref=WorkloadRef(namespace="default", name=name, uid=f"uid-{name}"),
        local_queue=lq,
        pod_sets=[PodSet(name="one", count=1, requests={"cpu": 8000})],
        queue_time=t,
    )
    record = Record(wl)
    record.key = order_key(0, t, wl.ref.uid)
    return record


ORDER = [
    (
        "admits workload from less active localqueue",
        {"lq-a": {"cpu": 8.0}, "lq-b": {"cpu": 2.0}},
        {},
        [("wl-a1", "lq-a", 0.0), ("wl-b1", "lq-b", 1.0)],
        "wl-b1",
    ),
    (
        "does not prioritize a zero-weight localqueue",
        {},
        {"lq-zero": 0.0},
        [("wl-z1", "lq-zero", 0.0), ("wl-a1", "lq-a", 1.0)],
        "wl-a1",
    ),
    (
        "schedules normally when queues have equal usage",
        {"lq-a": {"cpu": 2.0}, "lq-b": {"cpu": 2.0}},
        {},
        [("wl-b1", "lq-b", 1.0), ("wl-a1", "lq-a", 0.0)],
        "wl-a1",
    ),
    (
        "berth: a heavier LocalQueue weight makes its usage count less",
        {"lq-a": {"cpu": 8.0}, "lq-b": {"cpu": 2.0}},
        {"lq-a": 8.0},
        [("wl-a1", "lq-a", 1.0), ("wl-b1", "lq-b", 0.0)],
        "wl-a1",
    ),
]


@pytest.mark.parametrize(
    ("name", "consumed", "weights", "workloads", "head"), ORDER, ids=[o[0] for o in ORDER]
)
def test_kueue_admission_fair_sharing_order(
    name: str,
    consumed: dict[str, dict[str, float]],
    weights: dict[str, float],
    workloads: list[tuple[str, str, float]],
    head: str,
) -> None:
    """The ClusterQueue's head comes from the LocalQueue with the least weighted usage."""
    ledger = Ledger(SETTINGS)
    for lq, resources in consumed.items():
        ledger.seed(("default", lq), resources, now=0.0)
    records: dict[str, Record] = {}
    queue = FairShareQueue(
        False, records, lambda lq: ledger.usage(lq, weights.get(lq[1], 1.0), now=0.0)
    )
    for workload, lq, t in workloads:
        record = _record(workload, lq, t)
        records[record.wl.ref.uid] = record
        queue.push(record)
    found = queue.head()
    assert found is not None and found.wl.ref.name == head, name
    assert queue.pending()[0] is found and queue.size == len(workloads)


def test_the_head_moves_to_the_other_local_queue_as_usage_grows() -> None:
    """After lq-b's admission charges its usage, lq-a's workload heads the ClusterQueue."""
    ledger = Ledger(SETTINGS)
    records: dict[str, Record] = {}
    queue = FairShareQueue(False, records, lambda lq: ledger.usage(lq, 1.0, now=0.0))
    for workload, lq, t in [("b1", "lq-b", 0.0), ("b2", "lq-b", 1.0), ("a1", "lq-a", 2.0)]:
        record = records[f"uid-{workload}"] = _record(workload, lq, t)
        queue.push(record)
    first = queue.head()
    assert first is not None and first.wl.ref.name == "b1"
    queue.remove(first)
    ledger.penalize(("default", "lq-b"), {("default", "cpu"): 8000}, now=0.0)
    second = queue.head()
    assert second is not None and second.wl.ref.name == "a1"


def _afs_config(spec: dict[str, Any]) -> list[Any]:
    """cq1 with 8 CPUs under admission fair sharing, lq-a and lq-b; ``spec``: the
    Configuration's."""
    return config(
        flavor("default"),
        cq(
            "cq1",
            group(["cpu"], ("default", {"cpu": 8})),
            admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"},
        ),
        local_queue("lq-a", "cq1"),
        local_queue("lq-b", "cq1"),
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "berth"},
            "spec": spec,
        },
    )


def _afs_scheduler(enable: bool) -> Scheduler:
    """Kueue's TestScheduleForAFS setup: cq1 with 8 CPUs, lq-a and lq-b, half-life 10s."""
    spec: dict[str, Any] = {}
    if enable:
        spec = {"admissionFairSharing": {"usageHalfLifeTime": "10s", "usageSamplingInterval": "1s"}}
    s = Scheduler()
    s.clock = lambda: 1000.0
    s.set_config(_afs_config(spec))
    for name, queue, t in (
        ("wl-a1", "lq-a", 0),
        ("wl-a2", "lq-a", 1),
        ("wl-b1", "lq-b", 2),
        ("wl-b2", "lq-b", 3),
    ):
        s.submit(wl(name, queue, t=t, cpu="4"))
    return s


def test_admits_one_workload_from_each_localqueue_when_quota_is_limited() -> None:
    """Kueue's case of that name: after wl-a1, lq-a has consumed more than lq-b, so wl-b1
    goes before the older wl-a2; without admission fair sharing wl-a2 would."""
    assert admitted(_afs_scheduler(True).schedule()) == ["wl-a1", "wl-b1"]
    assert admitted(_afs_scheduler(False).schedule()) == ["wl-a1", "wl-a2"]


def test_the_local_queue_status_shows_its_decayed_consumption() -> None:
    """status.fairSharing.admissionFairSharingStatus: the entry penalty at once, then half
    way to what runs after one half-life, sampled once per usageSamplingInterval; absent
    without admission fair sharing."""
    s = _afs_scheduler(True)
    s.schedule()
    fair = s.local_queue_status("default", "lq-a")["fairSharing"]
    penalty = 4 * (1 - 0.5 ** (1 / 10))
    assert fair["admissionFairSharingStatus"]["consumedResources"] == {
        "cpu": f"{round(penalty * 1000)}m"
    }
    s.clock = lambda: 1000.5  # within usageSamplingInterval (1s): the same sample
    assert s.local_queue_status("default", "lq-a")["fairSharing"] == fair
    s.finish(ref("wl-b1"))  # a change of usage (another LocalQueue's): sampled again
    assert s.local_queue_status("default", "lq-a")["fairSharing"] != fair
    s.clock = lambda: 1010.0
    later = s.local_queue_status("default", "lq-a")["fairSharing"]["admissionFairSharingStatus"]
    assert later["consumedResources"] == {"cpu": f"{round((penalty / 2 + 2) * 1000)}m"}
    assert later["lastUpdate"] == "1970-01-01T00:16:50Z"
    assert "fairSharing" not in _afs_scheduler(False).local_queue_status("default", "lq-a")


def test_the_local_queue_usage_gauge() -> None:
    """berth_local_queue_admission_fair_sharing_usage (Kueue's
    kueue_local_queue_admission_fair_sharing_usage): the weighted consumption per LocalQueue
    of a ClusterQueue with admission fair sharing."""
    s = _afs_scheduler(True)
    s.schedule()
    usage = dict(s.queue_stats().lq_fair_usage)
    penalty = 4 * (1 - 0.5 ** (1 / 10))
    assert usage == pytest.approx({("default", "lq-a"): penalty, ("default", "lq-b"): penalty})
    assert _afs_scheduler(False).queue_stats().lq_fair_usage == {}


def test_the_remembered_head_follows_the_ledger() -> None:
    """The queue remembers its head while nothing changes; a change of usage alone (no
    change to the queue) is enough for the head to move to the other LocalQueue."""
    ledger = Ledger(SETTINGS)
    records: dict[str, Record] = {}
    queue = FairShareQueue(
        False,
        records,
        lambda lq: ledger.usage(lq, 1.0, now=0.0),
        lambda: ledger.stamp(0.0),
    )
    for workload, lq, t in [("b1", "lq-b", 0.0), ("a1", "lq-a", 1.0)]:
        queue.push(records.setdefault(f"uid-{workload}", _record(workload, lq, t)))
    first = queue.head()
    assert first is not None and first.wl.ref.name == "b1"
    assert queue.head() is first
    ledger.penalize(("default", "lq-b"), {("default", "cpu"): 8000}, now=0.0)
    second = queue.head()
    assert second is not None and second.wl.ref.name == "a1"


def test_a_replay_rebuilds_the_local_queue_history_from_the_facts_times() -> None:
    """After a restart the service folds the stream again: a workload that ran from two
    hours to one hour ago (half-life 1h) leaves 4 x (1 - 1/2) x 1/2 = 1 CPU of consumption,
    counted from the events' times, not from when they are replayed, plus its entry penalty
    charged two hours ago: 4 x (1 - 2^(-5m/1h)) x 1/4 = 0.056 CPU."""
    service = _afs_service()
    ref_ = WorkloadRef("default", "a1", "uid-a1")
    start = datetime.now(UTC) - timedelta(hours=2)
    assignment = FlavorAssignment("main", 1, {"cpu": "default"}, {"cpu": 4000})
    service._apply(
        [
            WorkloadSubmitted(
                source="test",
                workload=ref_,
                kind="Job",
                queue_name="lq-a",
                pod_sets=[PodSet("main", 1, {"cpu": 4000})],
                created=start,
                time=start,
            ),
            WorkloadAdmitted(
                source="admission",
                workload=ref_,
                cluster_queue="cq1",
                local_queue="lq-a",
                priority=0,
                assignments=[assignment],
                generation=1,
                time=start,
            ),
            WorkloadFinished(
                source="watcher",
                workload=ref_,
                generation=1,
                succeeded=True,
                time=start + timedelta(hours=1),
            ),
        ]
    )
    status = service.scheduler.local_queue_status("default", "lq-a")["fairSharing"]
    cpu = status["admissionFairSharingStatus"]["consumedResources"]["cpu"]
    assert cpu in ("1056m", "1055m")  # a few milliseconds of decay since "now" above


# A leader's steps, each at a time (seconds before "now"): submit NAME to LQ with CPUS, finish
# or evict NAME; after each step the leader runs a pass and publishes what it admits.
Step = tuple[float, str, str, str, int]
REPLAY = [
    (
        "a burst admitted just before the restart: only the entry penalties tell lq-a apart",
        [
            (5, "submit", "a1", "lq-a", 2),
            (5, "submit", "a2", "lq-a", 2),
            (4, "submit", "b1", "lq-b", 2),
        ],
    ),
    (
        "finished admissions: what ran decays from the events' times, penalties too",
        [
            (7200, "submit", "a1", "lq-a", 4),
            (3600, "finish", "a1", "", 0),
            (1800, "submit", "b1", "lq-b", 2),
            (900, "finish", "b1", "", 0),
        ],
    ),
    (
        "an eviction and a re-admission: two admissions, two penalties",
        [
            (600, "submit", "a1", "lq-a", 8),
            (500, "evict", "a1", "", 0),
            (100, "finish", "a1", "", 0),
            (50, "submit", "b1", "lq-b", 1),
        ],
    ),
]


def _afs_service() -> AdmissionService:
    """An admission service without a bus, over :func:`_afs_config` with half-life 1h."""
    service = AdmissionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.scheduler.set_config(_afs_config({"admissionFairSharing": {"usageHalfLifeTime": "1h"}}))
    return service


def _lead(steps: list[Step], now: datetime) -> tuple[AdmissionService, list[Any]]:
    """The leader: folds each fact, decides at that time, and folds its decisions' echoes;
    returns it and the stream it leaves."""
    leader, stream = _afs_service(), []
    for ago, action, name, lq, cpus in steps:
        at = now - timedelta(seconds=ago)
        ref_ = WorkloadRef("default", name, f"uid-{name}")
        generation = leader.scheduler.generation(ref_)
        event: Any
        if action == "submit":
            event = WorkloadSubmitted(
                source="test",
                workload=ref_,
                kind="Job",
                queue_name=lq,
                pod_sets=[PodSet("main", 1, {"cpu": cpus * 1000})],
                created=at,
                time=at,
            )
        elif action == "finish":
            event = WorkloadFinished(
                source="watcher", workload=ref_, generation=generation, succeeded=True, time=at
            )
        else:
            event = WorkloadEvicted(
                source="watcher", workload=ref_, generation=generation, reason="Preempted", time=at
            )
        leader._apply([event])
        leader.scheduler.clock = at.timestamp
        echoes = [
            WorkloadAdmitted(
                source="admission",
                workload=d.ref,
                cluster_queue=d.cluster_queue,
                local_queue=d.local_queue,
                priority=d.priority,
                assignments=d.assignments,
                generation=leader.scheduler.generation(d.ref),
                time=at,
            )
            for d in leader.scheduler.schedule()
            if isinstance(d, Admission)
        ]
        leader._apply(echoes)
        stream += [event, *echoes]
    return leader, stream


@pytest.mark.parametrize(("why", "steps"), REPLAY, ids=[r[0] for r in REPLAY])
def test_a_restarted_replica_rebuilds_the_leaders_local_queue_history(
    why: str, steps: list[Step]
) -> None:
    """A replica that replays the stream (after a restart, or a standby taking over) shows
    the same consumedResources as the leader that made the admissions, entry penalties
    included, and so orders the LocalQueues the same way."""
    now = datetime.now(UTC)
    leader, stream = _lead(steps, now)
    assert any(isinstance(e, WorkloadAdmitted) for e in stream), why
    restarted = _afs_service()
    restarted._apply(stream)
    for service in (leader, restarted):
        service.scheduler.clock = now.timestamp
    for lq in ("lq-a", "lq-b"):
        live = leader.scheduler.local_queue_status("default", lq)["fairSharing"]
        rebuilt = restarted.scheduler.local_queue_status("default", lq)["fairSharing"]
        assert rebuilt == live, why
        assert live["admissionFairSharingStatus"]["consumedResources"]["cpu"] != "0", why
