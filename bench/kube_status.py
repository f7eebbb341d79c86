"""Kueue's status views on the Kubernetes backend: API requests per workload, and status lag.

    .venv/bin/python bench/kube_status.py [--workloads 5000] [--qps 20 --burst 30] [--fast-qps 200]

5,000 Jobs (suspended, labelled with a LocalQueue) in the managed namespace ``batch`` of a
kmock API server; the watcher's Kubernetes backend runs in this process (the real
``KubernetesBackend``: list-watch, carrying out admissions, and the Kueue status writer with
its rate limits) on a real nats-server. Admission is the test stand-in of
tests/test_kube_status.py, not the admission service: it admits each workload as soon as the
watcher reports it (``WorkloadAdmitted`` on the bus, stamped with the time of the decision)
and answers the status API (``berth.api.admission.workloads``) with the real renderer
(services/admission/workload_objects.py), so what is measured is the watcher and the API
server, not admission's scheduling.

Printed for each run: the API requests the server received, by verb and resource, per
workload; the status lag, from the admission decision to the PATCH of the Workload's status
that carries its ``Admitted`` condition (p50/p99/max); Events sent and dropped; wall time.
The first run uses Kueue's client defaults (20 requests a second, bursts of 30), the second a
higher rate: if the limiter bounds the lag, the lag falls by about the same factor.

kmock serves every request with a scan of every earlier request and of every object, which
at 30,000 requests takes longer than the limiter: :class:`LeanEmulator` forgets each request
once it is served and finds an object by its key, so kmock's own cost stays flat. Its
Kubernetes semantics are kmock's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp.web
import attrs
import kmock as km
import msgspec
from nats.aio.msg import Msg

from berth_cli.natsserver import NatsServer
from services.admission.workload_objects import WorkloadRecord, render_workload
from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.kube.kueue_status import KUEUE_BURST, KUEUE_QPS, StatusSettings
from services.watcher.kube.mirroring import CONFIG_RESOURCES
from services.watcher.kube.namespaces import ManagedNamespaces
from services.watcher.kube.watching import WatchSettings
from shared.auth import ClientAuth
from shared.bus import STREAM, Bus
from shared.bus.batches import record_of
from shared.events import WorkloadAdmitted, WorkloadSubmitted
from shared.logging import configure_logging
from shared.service import Runtime
from shared.subjects import record_subject

NAMESPACE = "batch"
LOCAL_QUEUE = "user-queue"
JOBS = km.resource("batch/v1/jobs")
CAVEATS = (
    "Caveats: kmock is not an API server. It answers in-process (no network, no etcd, no real"
    " latency: each request costs what kmock's Python costs), has no resourceVersion"
    " semantics (no conflicts from concurrent writers, watches not resumable), no admission"
    " webhooks or CRD validation, no garbage collector, and keeps every object in memory."
    " Admission is a stand-in that admits at once. On a real cluster add the API server's"
    " latency to each request; the limiter's pace is the same."
)


@attrs.define(kw_only=True)
class LeanEmulator(km.KubernetesEmulator):
    """kmock's emulator with its two scans removed (see the module docstring), recording
    when each request was served and when each Workload's status first said Admitted."""

    served: list[tuple[str, str, bool]] = attrs.field(factory=list)  # method, path, watch
    admitted_written: dict[str, float] = attrs.field(factory=dict)  # Workload name -> time

    async def _handle(self, request: km.Request) -> aiohttp.web.StreamResponse:
        path, method = request.url.path, str(request.method.value)
        self.served.append((method, path, request.url.query.get("watch") == "true"))
        if method == "PATCH" and path.endswith("/status") and "/workloads/" in path:
            conditions = ((request.data or {}).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
                self.admitted_written.setdefault(path.split("/")[-2], time.monotonic())
        try:
            response: aiohttp.web.StreamResponse = await super()._handle(request)
            return response
        finally:
            try:
                self._requests.remove(request)  # kmock matches each request against all kept
            except ValueError:
                pass

    def _KubernetesEmulator__get_objs(self, request: km.Request, strict: bool) -> list[Any]:
        # By key for a named request (a get, patch or create); kmock's scan otherwise.
        if request.resource is not None and request.name is not None and request.namespace:
            key = (request.resource, request.namespace, request.name)
            return [self._objects[key]] if key in self._objects else []
        found = []
        for (resource, namespace, _name), obj in self._objects.items():
            namespace_ok = request.namespace is None or namespace == request.namespace
            if resource == request.resource and namespace_ok:
                found.append(obj)
        return found


def job(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"job-{index:05d}",
            "namespace": NAMESPACE,
            "uid": f"uid-{index:05d}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-24T00:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                }
            },
        },
    }


class AdmissionStandIn:
    """Admits every workload the watcher reports, at once; answers the status API."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.records: dict[str, WorkloadRecord] = {}
        self.admitted_at: dict[str, float] = {}  # workload key -> time of the decision
        self.outbox: list[WorkloadAdmitted] = []
        self.wanted = asyncio.Event()

    async def on_submitted(self, msg: Msg) -> None:
        """The watcher's submissions, from the record (``record_subject``), not the copies,
        which a stack may not keep."""
        for event in record_of(msg):
            if isinstance(event, WorkloadSubmitted) and event.workload.key not in self.records:
                self._admit(event)

    def _admit(self, event: WorkloadSubmitted) -> None:
        record = self.records[event.workload.key] = WorkloadRecord.of(event)
        admitted = WorkloadAdmitted(
            source="admission",
            workload=event.workload,
            cluster_queue="cluster-queue",
            local_queue=LOCAL_QUEUE,
            priority=0,
            assignments=[],
            generation=1,
        )
        self.admitted_at[event.workload.key] = time.monotonic()
        record.on_admitted(admitted)  # what the status API renders from now on
        self.outbox.append(admitted)
        self.wanted.set()

    async def publish(self) -> None:
        while True:
            await self.wanted.wait()
            self.wanted.clear()
            batch, self.outbox = self.outbox, []
            await self.bus.publish_many(batch)

    async def answer(self, _: str, data: bytes) -> dict[str, Any]:
        request = msgspec.json.decode(data)
        names = [n for n in request.get("names") or self.records if n in self.records]
        offset = int(request.get("offset") or 0)
        page = names[offset : offset + 500]
        items = [render_workload(self.records[n], {"local_queue": LOCAL_QUEUE}) for n in page]
        return {"items": items, "next": offset + 500 if offset + 500 < len(names) else None}


@dataclass
class Figures:
    workloads: int
    qps: float
    burst: int
    seconds: float = 0.0
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    lags: list[float] = field(default_factory=list)
    limited: int = 0  # requests through the status writer's limiter
    events_sent: int = 0
    events_dropped: int = 0
    redelivered: int = 0  # decisions the watcher's consumer got again (ack not in time)

    @property
    def written(self) -> int:
        return len(self.lags)


def classify(method: str, path: str, watch: bool) -> tuple[str, str]:
    """(verb, resource) of a request path, e.g. ("patch", "workloads/status")."""
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]  # /api/v1 or /apis/group/version
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    named = len(parts) > 1
    verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}.get(method)
    if verb is None:
        verb = "watch" if watch else ("get" if named else "list")
    return verb, resource


async def run(
    workloads: int, *, qps: float, burst: int, give_up_after: float = 900.0, data_dir: Path
) -> Figures:
    """One run: ``workloads`` Jobs through the watcher, the status writer at ``qps``/``burst``."""
    figures = Figures(workloads=workloads, qps=qps, burst=burst)
    with NatsServer(store_dir=data_dir / "nats") as server:
        async with LeanEmulator() as api, km.Server(api):
            for index in range(workloads):
                api.objects[JOBS, NAMESPACE, f"job-{index:05d}"] = job(index)
            # Kueue's Workload CRD installed, and Pods and Events served: kmock serves a
            # resource once it holds an object of it (these are outside the managed namespace).
            for resource in ("kueue.x-k8s.io/v1beta2/workloads", "v1/pods", "v1/events"):
                api.objects[km.resource(resource), "kube-system", "placeholder"] = {
                    "metadata": {"name": "placeholder"}
                }
            open_bus = ClientAuth()  # the bench's own nats-server asks for no credentials
            admission_bus = await Bus.connect(server.url, source="admission", auth=open_bus)
            bus = await Bus.connect(server.url, source="watcher", auth=open_bus)
            await bus.ensure_stream()
            stand_in = AdmissionStandIn(admission_bus)
            submitted = await admission_bus.nc.subscribe(
                record_subject("wl.submitted", batching=bus.settings.batching),
                cb=stand_in.on_submitted,
            )
            answers = await admission_bus.serve_requests(
                "berth.api.admission.workloads", stand_in.answer
            )
            publisher = asyncio.create_task(stand_in.publish())
            runtime = Runtime(name="watcher", bus=bus, data_dir=str(data_dir / "watcher"))
            client = KubeClient.for_host(str(api.url).rstrip("/"))
            backend = KubernetesBackend(
                runtime,
                client=client,
                settings=WatchSettings(server_timeout=600, inactivity_timeout=900),
                # kmock cannot serve /api/v1/namespaces (tests/test_kube_backend.py says why)
                config_resources={k: v for k, v in CONFIG_RESOURCES.items() if k != "Namespace"},
                status=StatusSettings(qps=qps, burst=burst),
                namespaces=ManagedNamespaces(frozenset({NAMESPACE})),
            )
            start = time.monotonic()
            observing = asyncio.create_task(backend.observe())
            try:
                async with asyncio.timeout(give_up_after):
                    while len(api.admitted_written) < workloads:
                        if observing.done():
                            observing.result()  # a crash: raise it here
                        await asyncio.sleep(0.2)
            except TimeoutError:
                pass  # reported as fewer written than workloads
            figures.seconds = time.monotonic() - start
            consumer = await bus.js.consumer_info(STREAM, "watcher")
            figures.redelivered = consumer.num_redelivered or 0
            runtime.stopping.set()
            await asyncio.wait_for(observing, 30)
            await runtime.cancel_tasks(grace=1)
            publisher.cancel()
            await submitted.unsubscribe()
            await answers.unsubscribe()
            await client.close()
            await bus.close()
            await admission_bus.close()
        names = {f"job-{i:05d}": f"{NAMESPACE}/job-{i:05d}" for i in range(workloads)}
        for path_name, written in api.admitted_written.items():
            # The Workload is named job-<job name>-<hash>: strip the prefix and the hash.
            key = names.get(path_name[len("job-") :].rsplit("-", 1)[0])
            if key is not None and key in stand_in.admitted_at:
                figures.lags.append(written - stand_in.admitted_at[key])
        figures.requests = Counter(classify(*served) for served in api.served)
        figures.limited = backend.status.requests
        figures.events_sent = backend.status.recorder.sent
        figures.events_dropped = backend.status.recorder.dropped
    return figures


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def render(figures: Figures) -> str:
    n = figures.workloads
    lines = [
        f"{n:,} workloads, status writer at {figures.qps:g} requests/s, bursts of "
        f"{figures.burst}: {figures.seconds:.1f} s",
        f"  Workload status with Admitted written: {figures.written:,} of {n:,}",
    ]
    if figures.lags:
        lines.append(
            "  status lag (admission -> Workload condition written): "
            f"p50 {percentile(figures.lags, 0.5):.2f} s, p99 {percentile(figures.lags, 0.99):.2f} s,"
            f" max {max(figures.lags):.2f} s (mean {statistics.fmean(figures.lags):.2f} s)"
        )
    lines.append(
        f"  through the limiter: {figures.limited / n:.2f} requests/workload"
        f" (floor at this rate: {figures.limited / figures.qps:.0f} s);"
        f" Events sent {figures.events_sent:,}, dropped {figures.events_dropped:,}"
        " (their own queue and rate, as client-go's recorder)"
    )
    lines.append(
        f"  decisions delivered again to the watcher's consumer: {figures.redelivered:,}"
        " (each would find its work done: a GET of the Job, no PATCH)"
    )
    lines.append("  API requests            total   per workload")
    for (verb, resource), count in sorted(
        figures.requests.items(), key=lambda i: (i[0][1], i[0][0])
    ):
        lines.append(f"    {verb:7} {resource:20} {count:6,}   {count / n:8.3f}")
    total = sum(figures.requests.values())
    lines.append(f"    {'all':28} {total:6,}   {total / n:8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=5_000)
    parser.add_argument("--qps", type=float, default=KUEUE_QPS)
    parser.add_argument("--burst", type=int, default=KUEUE_BURST)
    parser.add_argument("--fast-qps", type=float, default=200.0, help="the second run's rate")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    args = parser.parse_args(argv)
    configure_logging(service="bench-kube-status", level="warning")
    began = time.monotonic()
    runs = [(args.qps, args.burst), (args.fast_qps, int(args.fast_qps * 1.5))]
    print(
        f"Floor of the first run: {args.workloads:,} workloads x 2 status requests"
        f" / {args.qps:g} per second = {args.workloads * 2 / args.qps:.0f} s"
    )
    results = []
    for qps, burst in runs:
        with tempfile.TemporaryDirectory(prefix="bench-kube-status-") as tmp:
            figures = asyncio.run(
                run(
                    args.workloads,
                    qps=qps,
                    burst=burst,
                    give_up_after=args.timeout,
                    data_dir=Path(tmp),
                )
            )
        results.append(figures)
        print(render(figures), flush=True)
    slow, fast = results
    if slow.lags and fast.lags:
        print(
            f"max lag {max(slow.lags):.1f} s at {slow.qps:g}/s vs {max(fast.lags):.1f} s at"
            f" {fast.qps:g}/s: {max(slow.lags) / max(fast.lags):.1f}x for"
            f" {fast.qps / slow.qps:.0f}x the rate"
        )
    print(CAVEATS)
    print(f"took {time.monotonic() - began:.0f} s")
    complete = all(f.written == f.workloads for f in results)
    return 0 if complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
