"""Synthetic events and queues for the console's tests (a model fed directly, no bus), and the
console served on a loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from berth_console.app import build_app
from berth_console.model import Model
from berth_console.pages.base import Context
from shared.events import (
    AnyEvent,
    EvictionRequested,
    FlavorAssignment,
    PodSet,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
    subject_for,
)

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@asynccontextmanager
async def serving(context: Context, token: str) -> AsyncIterator[str]:
    """The console app on an ephemeral loopback port; yields its base URL."""
    stopping = asyncio.Event()
    runner = web.AppRunner(build_app(context, token=token, stopping=stopping), shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        stopping.set()
        await runner.cleanup()


def ref(name: str, namespace: str = "team-a") -> WorkloadRef:
    return WorkloadRef(namespace, name, f"uid-{namespace}-{name}")


def submitted(
    name: str, *, namespace: str = "team-a", queue: str = "lq", cpu: int = 1000
) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="watcher",
        workload=ref(name, namespace),
        time=T0,
        kind="Job",
        queue_name=queue,
        pod_sets=[PodSet("main", 1, {"cpu": cpu})],
        created=T0,
    )


def pending(
    name: str, *, cq: str = "cq", namespace: str = "team-a", message: str = "no room"
) -> WorkloadPending:
    return WorkloadPending(
        source="admission",
        workload=ref(name, namespace),
        time=T0,
        cluster_queue=cq,
        reason="Pending",
        message=message,
        priority=10,
    )


def admitted(
    name: str, *, cq: str = "cq", namespace: str = "team-a", generation: int = 1, cpu: int = 1000
) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        source="admission",
        workload=ref(name, namespace),
        time=T0 + timedelta(seconds=generation),
        cluster_queue=cq,
        local_queue="lq",
        priority=10,
        assignments=[FlavorAssignment("main", 1, {"cpu": "on-demand"}, {"cpu": cpu})],
        generation=generation,
    )


def started(name: str, generation: int = 1, *, namespace: str = "team-a") -> WorkloadStarted:
    return WorkloadStarted(source="watcher", workload=ref(name, namespace), generation=generation)


def preempted(name: str, by: str, generation: int = 1) -> list[AnyEvent]:
    return [
        EvictionRequested(
            source="preemption",
            workload=ref(name),
            cluster_queue="cq",
            generation=generation,
            reason="Preempted",
            detail="InClusterQueue",
            message="to make room",
            preemptor=ref(by),
        ),
        WorkloadEvicted(
            source="watcher", workload=ref(name), generation=generation, reason="Preempted"
        ),
        PriorityBoosted(source="recovery", workload=ref(name), boost=5, reserved=True),
    ]


def feed(model: Model, events: list[AnyEvent]) -> None:
    for event in events:
        model.apply(model.seq + 1, subject_for(event), event)


def cluster_queue(
    name: str,
    *,
    cohort: str = "",
    nominal: str = "10",
    used: str = "0",
    borrowed: str = "0",
    pending: int = 0,
    admitted: int = 0,
    lending_limit: str | None = None,
) -> dict[str, Any]:
    resource: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal}
    if lending_limit is not None:
        resource["lendingLimit"] = lending_limit
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "on-demand", "resources": [resource]}],
                }
            ],
        },
        "status": {
            "pendingWorkloads": pending,
            "admittedWorkloads": admitted,
            "flavorsUsage": [
                {
                    "name": "on-demand",
                    "resources": [{"name": "cpu", "total": used, "borrowed": borrowed}],
                }
            ],
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                }
            ],
        },
    }
