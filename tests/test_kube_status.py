"""Kueue-visible status on the Kubernetes backend: Workload objects, Events, rate limits."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import kmock
import kmock as km
import msgspec
import pytest

from services.admission.workload_objects import WorkloadRecord, render_workload
from services.watcher.kube import recorder
from services.watcher.kube.api import KubeClient
from services.watcher.kube.kueue_status import (
    Coalescing,
    KueueStatusWriter,
    StatusSettings,
    TokenBucket,
    job_events,
    kueue_workload,
)
from services.watcher.kube.preemptors import preemption_message
from shared.bus import Bus, BusSettings
from shared.bus.settings import ALL_COPIES
from shared.events import (
    EvictionRequested,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from tests.conftest import bus_auth

T0 = datetime(2025, 1, 1, tzinfo=UTC)
REF = WorkloadRef("ns", "low-3ce1", "u1")
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "low-3ce1", "namespace": "ns", "uid": "u1"},
    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
}
SUBMITTED = WorkloadSubmitted(
    source="watcher",
    workload=REF,
    kind="Job",
    queue_name="user-queue",
    pod_sets=[PodSet(name="main", count=1, requests={"cpu": 1000})],
    created=T0,
)
ADMITTED = WorkloadAdmitted(
    source="admission",
    workload=REF,
    cluster_queue="cluster-queue",
    local_queue="user-queue",
    priority=0,
    assignments=[
        FlavorAssignment(pod_set="main", count=1, flavors={"cpu": "default"}, usage={"cpu": 1000})
    ],
    generation=1,
    time=T0,
)
PENDING = WorkloadPending(
    source="admission",
    workload=REF,
    cluster_queue="cluster-queue",
    reason="Pending",
    message="couldn't assign flavors to pod set main: insufficient unused quota for cpu",
    time=T0,
)


def _rendered(*events: Any) -> dict[str, Any]:
    record = WorkloadRecord.of(SUBMITTED)
    for event in events:
        if isinstance(event, WorkloadPending):
            record.on_pending(event)
        elif isinstance(event, WorkloadAdmitted):
            record.on_admitted(event)
    return render_workload(record, {"local_queue": "user-queue"})


def _jsonpath(obj: dict[str, Any], column: str) -> str:
    """The printer columns of Kueue's Workload CRD, as kubectl evaluates their JSONPaths."""
    status = obj.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return str(
        {
            "QUEUE": obj["spec"].get("queueName", ""),
            "RESERVED IN": (status.get("admission") or {}).get("clusterQueue", ""),
            "ADMITTED": conditions.get("Admitted", ""),
            "FINISHED": conditions.get("Finished", ""),
        }[column]
    )


def kubectl_get_workloads(objects: list[dict[str, Any]], now: datetime) -> str:
    """`kubectl get workloads`: NAME, the CRD's printer columns, AGE; blank when absent."""
    header = ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    rows = [header]
    for obj in objects:
        created = datetime.fromisoformat(
            obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")
        )
        age = f"{int((now - created).total_seconds() // 60)}m"
        columns = [_jsonpath(obj, c) for c in header[1:5]]
        rows.append([obj["metadata"]["name"], *columns, age])
    widths = [max(len(row[i]) for row in rows) + 3 for i in range(len(header))]
    return "\n".join(
        "".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def test_kubectl_get_workloads_columns_match_the_seed() -> None:
    """A pending workload shows its queue and nothing else, as in the seed document's
    `kubectl get workloads`; an admitted one fills RESERVED IN and ADMITTED."""
    pending = kueue_workload(_rendered(PENDING), JOB)
    pending["metadata"] |= {"name": "low-3ce1", "creationTimestamp": "2025-01-01T00:00:00Z"}
    table = kubectl_get_workloads([pending], T0 + timedelta(minutes=5))
    assert table.splitlines()[0].split() == [
        "NAME",
        "QUEUE",
        "RESERVED",
        "IN",
        "ADMITTED",
        "FINISHED",
        "AGE",
    ]
    assert table.splitlines()[1].split() == ["low-3ce1", "user-queue", "5m"]
    admitted = kueue_workload(_rendered(PENDING, ADMITTED), JOB)
    admitted["metadata"] |= {"name": "low-3ce1", "creationTimestamp": "2025-01-01T00:00:00Z"}
    row = kubectl_get_workloads([admitted], T0 + timedelta(minutes=2)).splitlines()[1]
    assert row.split() == ["low-3ce1", "user-queue", "cluster-queue", "True", "2m"]


def test_workload_object_is_kueue_v1beta2_owned_by_the_job() -> None:
    """The Workload carries the Job's pod template, the queue, the owner reference, and
    admission's conditions and flavors without Berth's own status fields."""
    workload = kueue_workload(_rendered(ADMITTED), JOB)
    assert workload["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert workload["metadata"]["name"].startswith("job-low-3ce1-")
    [owner] = workload["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", "u1", True)
    [pod_set] = workload["spec"]["podSets"]
    assert pod_set["template"]["spec"]["containers"][0]["image"] == "busybox"
    assert workload["spec"]["queueName"] == "user-queue"
    assert workload["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "default"}
    assert {c["type"] for c in workload["status"]["conditions"]} == {"QuotaReserved", "Admitted"}
    assert "berth" not in workload["status"]


EVENT_CASES = [
    (None, (PENDING,), [("Normal", "Pending")], "a new pending workload says why"),
    ((PENDING,), (PENDING,), [], "the same reason again records nothing"),
    (
        (PENDING,),
        (PENDING, ADMITTED),
        [("Normal", "QuotaReserved"), ("Normal", "Admitted")],
        "admission records QuotaReserved and Admitted, as Kueue does",
    ),
]


@pytest.mark.parametrize(
    ("before", "after", "expected", "reason"), EVENT_CASES, ids=[c[3] for c in EVENT_CASES]
)
def test_job_events_follow_condition_transitions(
    before: tuple[Any, ...] | None, after: tuple[Any, ...], expected: list[Any], reason: str
) -> None:
    """An Event per transition, none for a repeat."""
    old = kueue_workload(_rendered(*before), JOB) if before is not None else None
    new = kueue_workload(_rendered(*after), JOB)
    assert [(t, r) for t, r, _ in job_events(old, new)] == expected, reason


async def test_token_bucket_allows_a_burst_then_qps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kueue's defaults: 30 at once, then 20 a second. On a clock of the test's own, moved
    only by the waits the bucket asks for, so a loaded machine changes nothing: the burst
    waits for nothing, and the 10 past it for exactly 0.5 s."""
    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += max(seconds, 1e-6)  # a real sleep's least: the float sum may not move

    monkeypatch.setattr(recorder, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(recorder, "asyncio", SimpleNamespace(sleep=sleep))
    bucket = TokenBucket(qps=20, burst=30)
    for _ in range(30):
        await bucket.acquire()
    assert clock[0] == 0, "the burst waited"
    for _ in range(10):
        await bucket.acquire()
    assert clock[0] == pytest.approx(10 / 20, abs=1e-4)


def test_coalescing_keeps_one_entry_per_key_and_flags_overflow() -> None:
    """A key marked twice is written once; past the bound a full round is asked for."""
    dirty = Coalescing(limit=2)
    for key in ("a", "b", "a", "c"):
        dirty.mark(key)
    assert dirty.take(10) == ["a", "b"] and dirty.overflowed


async def test_kube_status_writes_workload_status_and_events(
    kmock: kmock.KubernetesEmulator, nats_url: str
) -> None:
    """With Kueue's CRDs served: one POST of the Workload, one status PATCH, one Event per
    transition; with them absent the writer says so and writes nothing."""
    workloads_key = km.resource("kueue.x-k8s.io/v1beta2/workloads")
    kmock.objects[workloads_key, "zz", "placeholder"] = {"metadata": {"name": "placeholder"}}
    kmock.objects[km.resource("v1/events"), "zz", "e"] = {"metadata": {"name": "e"}}
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    rendered = _rendered(PENDING, ADMITTED)

    async def admission(_: str, data: bytes) -> dict[str, Any]:
        request = msgspec.json.decode(data)
        assert request["names"] == ["ns/low-3ce1"]
        return {"items": [rendered], "next": None}

    api = await bus.serve_requests("berth.api.admission.workloads", admission)
    client = KubeClient.for_host(str(kmock.url).rstrip("/"))
    writer = KueueStatusWriter(bus, client, {"u1": JOB}, settings=StatusSettings())
    stopping = asyncio.Event()
    task = asyncio.create_task(writer.run(stopping))
    try:
        async with asyncio.timeout(5):
            # kmock records requests without a notification to wait on: poll.
            while len([r for r in kmock if r.method != "GET"]) < 4:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        stopping.set()
        try:
            await asyncio.wait_for(task, 5)  # the writer's own failure fails the test here
        finally:
            await api.unsubscribe()
            await client.close()
            await bus.close()
    writes = [(r.method, r.url.path) for r in kmock if r.method != "GET"]
    name = kueue_workload(rendered, JOB)["metadata"]["name"]
    assert writes == [
        ("POST", "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads"),
        ("PATCH", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/{name}/status"),
        ("POST", "/api/v1/namespaces/ns/events"),
        ("POST", "/api/v1/namespaces/ns/events"),
    ]
    reasons = [r.data["reason"] for r in kmock if r.url.path.endswith("/events")]
    assert reasons == ["QuotaReserved", "Admitted"]
    assert writer.views == {"workloads"}


PREEMPTOR = WorkloadRef("ns", "high-7f2a", "u9")
MESSAGE_CASES = [
    ("wl-9", "u9", "InClusterQueue", "Preempted to accommodate a workload (UID: wl-9, JobUID: u9) due to prioritization in the ClusterQueue", "Kueue's wording, word for word"),
    ("", "u9", "InCohortReclamation", "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: u9) due to reclamation within the cohort", "no Workload written for the preemptor: UNKNOWN, as Kueue says for an empty uid"),
    ("wl-9", "u9", "InCohortReclaimWhileBorrowing", "Preempted to accommodate a workload (UID: wl-9, JobUID: u9) due to reclamation within the cohort while borrowing", "borrowing"),
    ("wl-9", "u9", "InCohortFairSharing", "Preempted to accommodate a workload (UID: wl-9, JobUID: u9) due to Fair Sharing within the cohort", "Kueue's capital F"),
]


@pytest.mark.parametrize(("workload_uid", "job_uid", "reason", "message", "why"), MESSAGE_CASES, ids=[c[4] for c in MESSAGE_CASES])
def test_preemption_message_is_kueues(
    workload_uid: str, job_uid: str, reason: str, message: str, why: str
) -> None:
    assert preemption_message(workload_uid, job_uid, reason) == message, why


@pytest.mark.parametrize(
    "copies",
    [ALL_COPIES, ()],
    ids=["copies", "no-copies"],  # BERTH_BUS_COPIES: the writer follows the batches either way
)
async def test_the_preempted_event_names_the_preemptor(
    kmock: kmock.KubernetesEmulator, nats_url: str, copies: tuple[str, ...]
) -> None:
    """Preemption's EvictionRequested names the preemptor; the victim's Preempted Event and
    its Workload's Preempted and Evicted conditions carry Kueue's message with the
    preemptor's Workload uid (listed from the cluster at start) and its Job's uid. The
    eviction reaches the writer whether or not the deployment keeps per-workload copies."""
    workloads_key = km.resource("kueue.x-k8s.io/v1beta2/workloads")
    kmock.objects[workloads_key, "ns", "job-high-7f2a-abcde"] = {
        "metadata": {
            "name": "job-high-7f2a-abcde",
            "uid": "wl-9",
            "labels": {"kueue.x-k8s.io/job-uid": "u9"},
        }
    }
    kmock.objects[km.resource("v1/events"), "zz", "e"] = {"metadata": {"name": "e"}}
    bus = await Bus.connect(
        nats_url, source="watcher", auth=bus_auth(nats_url), settings=BusSettings(copies=copies)
    )
    await bus.ensure_stream()
    eviction = EvictionRequested(
        source="preemption",
        workload=REF,
        cluster_queue="cluster-queue",
        generation=1,
        reason="Preempted",
        detail="InClusterQueue",
        message="Preempted to accommodate a workload (UID: u9, name: ns/high-7f2a) due to prioritization in the ClusterQueue",
        preemptor=PREEMPTOR,
        time=T0 + timedelta(minutes=1),
    )
    rendered = [_rendered(PENDING, ADMITTED)]

    async def admission(_: str, data: bytes) -> dict[str, Any]:
        return {"items": rendered, "next": None}

    api = await bus.serve_requests("berth.api.admission.workloads", admission)
    client = KubeClient.for_host(str(kmock.url).rstrip("/"))
    writer = KueueStatusWriter(bus, client, {"u1": JOB}, settings=StatusSettings())
    stopping = asyncio.Event()
    task = asyncio.create_task(writer.run(stopping))

    def events() -> list[dict[str, Any]]:
        return [r.data for r in kmock if r.method == "POST" and r.url.path.endswith("/events")]

    try:
        async with asyncio.timeout(5):
            while len(events()) < 2:  # QuotaReserved, Admitted  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            record = WorkloadRecord.of(SUBMITTED)
            record.on_pending(PENDING)
            record.on_admitted(ADMITTED)
            record.on_eviction_requested(eviction)
            rendered[:] = [render_workload(record, {"local_queue": "user-queue"})]
            await bus.publish(eviction)  # marks the workload dirty, naming the preemptor
            while len(events()) < 4:  # Preempted, Evicted  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 5)
        await api.unsubscribe()
        await client.close()
        await bus.close()
    kueue = "Preempted to accommodate a workload (UID: wl-9, JobUID: u9) due to prioritization in the ClusterQueue"
    assert [(e["type"], e["reason"], e["message"]) for e in events()[2:]] == [
        ("Warning", "Preempted", kueue),
        ("Warning", "Evicted", kueue),
    ]
    [*_, patch] = [r.data for r in kmock if r.method == "PATCH"]
    conditions = {c["type"]: c["message"] for c in patch["status"]["conditions"]}
    assert conditions["Preempted"] == conditions["Evicted"] == kueue


FAIR_STATUS_CASES = [
    (
        "cohorts",
        None,
        {"fairSharing": {"weightedShare": 250}},
        "/apis/kueue.x-k8s.io/v1beta2/cohorts/root/status",
        "a Cohort's weightedShare: `kubectl get cohorts -o yaml` shows it",
    ),
    (
        "localqueues",
        "ns",
        {
            "pendingWorkloads": 0,
            "fairSharing": {
                "weightedShare": 0,
                "admissionFairSharingStatus": {
                    "consumedResources": {"cpu": "85m"},
                    "lastUpdate": "2025-01-01T00:00:00Z",
                },
            },
        },
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/root/status",
        "a LocalQueue's admission fair sharing history, under Kueue's field names",
    ),
]


@pytest.mark.parametrize(
    ("view", "namespace", "status", "path", "why"),
    FAIR_STATUS_CASES,
    ids=[c[4] for c in FAIR_STATUS_CASES],
)
async def test_kube_status_writes_fair_sharing_status(
    kmock: kmock.KubernetesEmulator,
    nats_url: str,
    view: str,
    namespace: str | None,
    status: dict[str, Any],
    path: str,
    why: str,
) -> None:
    """With the CRD served, the writer patches the object's status as admission's API renders
    it from its first round, before any event; then not again while it is unchanged."""
    kmock.objects[km.resource(f"kueue.x-k8s.io/v1beta2/{view}"), namespace, "root"] = {
        "metadata": {"name": "root"}
    }
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    metadata = {"name": "root"} if namespace is None else {"name": "root", "namespace": namespace}
    rendered = {"metadata": metadata, "spec": {}, "status": status}

    async def admission(_: str, data: bytes) -> dict[str, Any]:
        return {"items": [rendered], "next": None}

    api = await bus.serve_requests(f"berth.api.admission.{view}", admission)
    client = KubeClient.for_host(str(kmock.url).rstrip("/"))
    writer = KueueStatusWriter(bus, client, {}, settings=StatusSettings())
    stopping = asyncio.Event()
    task = asyncio.create_task(writer.run(stopping))
    try:
        async with asyncio.timeout(5):
            while not [r for r in kmock if r.method == "PATCH"]:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await writer._write_queues()  # a second round: the same status, no request
    finally:
        stopping.set()
        try:
            await asyncio.wait_for(task, 5)
        finally:
            await api.unsubscribe()
            await client.close()
            await bus.close()
    patches = [r for r in kmock if r.method == "PATCH"]
    assert [r.url.path for r in patches] == [path], why
    assert patches[0].data == {"status": status}, why
    assert writer.views == {view}, why
