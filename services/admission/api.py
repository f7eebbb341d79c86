"""Admission's read API: core NATS request/reply on ``berth.api.admission.<resource>``.

The CLI (or any tool) asks; admission answers from memory, so an answer is exactly what
admission decides with. Requests and replies are JSON. A reply lists at most ``limit`` items
and gives ``next`` (an offset) when there are more, so that no reply outgrows NATS's
message size limit.

- ``workloads``: ``{"namespace": "team-a" | null, "names": ["ns/name", ...] | null, "offset": 0,
  "limit": 500}`` -> Kueue Workloads (``names``: only those, as the watcher asks for the ones
  whose status it writes to a cluster)
- ``clusterqueues``: ``{}`` -> Kueue ClusterQueues with status
- ``localqueues``: ``{"namespace": ... | null}`` -> Kueue LocalQueues with status
- ``cohorts``: ``{}`` -> Kueue Cohorts (the applied objects) with status
- ``pending``: ``{"clusterQueue": "name"}`` -> pending workloads in queue order (visibility API)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from services.admission.bounds import QueueWaits
from services.admission.model import WorkloadView
from services.admission.workload_objects import WorkloadRecord, render_workload
from shared.bus import API_SUBJECT, Served
from shared.config import ClusterQueue, ClusterQueuePolicy, Cohort, LocalQueue, encode_object
from shared.durations import kube_timestamp
from shared.logging import get_logger
from shared.starvation import QueueFacts, queue_facts

if TYPE_CHECKING:
    from services.admission.service import AdmissionService

__all__ = ["API_PREFIX", "serve_api"]

log = get_logger("admission.api")
API_PREFIX = f"{API_SUBJECT}.admission"
PAGE_LIMIT = 500


class Request(msgspec.Struct, rename="camel"):
    namespace: str | None = None
    cluster_queue: str | None = None
    names: list[str] | None = None  # "namespace/name" keys
    offset: int = 0
    limit: int = PAGE_LIMIT


_request_decoder = msgspec.json.Decoder(Request)


def _bounds(service: AdmissionService) -> Callable[[WorkloadView], dict[str, Any]]:
    """``runs_by`` / ``runs_by_reason`` of a view: its starvation bound (docs/ageing.md).
    A ClusterQueue's facts are read once per request, and only for pending workloads' (the
    watcher asks for single workloads among a thousand ClusterQueues)."""
    policies = service.config.of_kind(ClusterQueuePolicy)
    specs = {cq.metadata.name: cq for cq in service.config.of_kind(ClusterQueue)}
    seen: dict[str, tuple[QueueFacts | None, str]] = {}  # cq -> (facts, why it is inactive)
    waits: list[dict[str, QueueWaits]] = []  # the waits without a clock, read at first need

    def queue(name: str) -> tuple[QueueFacts | None, str]:
        if name not in seen:
            spec = specs.get(name)
            [active] = service.scheduler.cluster_queue_status(name)["conditions"]
            why = "" if active["status"] == "True" else f"ClusterQueue {name} is inactive"
            seen[name] = (None if spec is None else queue_facts(spec), why)
        return seen[name]

    def fields(view: WorkloadView) -> dict[str, Any]:
        if view.state != "pending":
            return {}
        facts, blocked = queue(view.cluster_queue)
        if view.reason == "Inadmissible":  # a stopped LocalQueue, an unknown priority class
            blocked = view.message
        if not waits:
            waits.append(service.bounds.waits(service.scheduler.workload_views()))
        bound = service.bounds.bound(
            view, policies=policies, facts=facts, blocked=blocked, waits=waits[0]
        )
        if bound is None:
            return {}
        return {"runs_by": bound.timestamp, "runs_by_reason": bound.reason}

    return fields


def view_fields(view: WorkloadView) -> dict[str, Any]:
    """The scheduler's view of one workload as plain fields."""
    return {
        "cluster_queue": view.cluster_queue,
        "local_queue": view.local_queue,
        "priority": view.effective_priority,
        "base_priority": view.priority,
        "state": view.state,
        "position_in_cluster_queue": view.position_in_cluster_queue,
        "position_in_local_queue": view.position_in_local_queue,
        "reason": view.message or view.reason,
        "due_at": None if view.due is None else kube_timestamp(view.due),
    }


def _page(items: list[Any], request: Request) -> dict[str, Any]:
    limit = max(1, min(request.limit, PAGE_LIMIT))
    chunk = items[request.offset : request.offset + limit]
    following = request.offset + limit
    return {"items": chunk, "next": following if following < len(items) else None}


def workloads(service: AdmissionService, request: Request) -> dict[str, Any]:
    names = None if request.names is None else set(request.names)
    records = sorted(
        (
            record
            for record in service.records.values()
            if (request.namespace is None or record.ref.namespace == request.namespace)
            and (names is None or record.ref.key in names)
        ),
        key=lambda record: (record.ref.namespace, record.ref.name),
    )
    page = _page(records, request)
    # Render only the page: a client paging through 100,000 workloads renders each once.
    views = {view.ref.uid: view for view in service.scheduler.workload_views()}
    bounds = _bounds(service)
    items = []
    for record in page["items"]:
        view = views.get(record.ref.uid)
        if view is None:
            fields = _unqueued(service, record)
        else:
            fields = {**view_fields(view), **bounds(view)}
        fields.update(service.gates.view(record.ref.uid))  # checks, backoff
        item = render_workload(record, fields)
        service.activity.show(record.ref.uid, item)  # spec.active, its reason
        items.append(item)
    page["items"] = items
    return page


def _unqueued(service: AdmissionService, record: WorkloadRecord) -> dict[str, Any]:
    """The fields of a workload the scheduler does not hold (inactive: `berth stop
    workload`): its priority as its class resolves, as Kueue's Workload keeps
    ``spec.priority`` while inactive (no boost: it does not wait), not 0."""
    priority = service.scheduler.class_priority(record.submitted)
    return {} if priority is None else {"priority": priority, "base_priority": priority}


def _config_items(service: AdmissionService, kind: type[Any]) -> list[Any]:
    return sorted(
        service.config.of_kind(kind),
        key=lambda obj: (obj.metadata.namespace, obj.metadata.name),
    )


def _with_status(
    service: AdmissionService, kind: type[Any], status: Callable[[str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every applied object of a cluster-scoped ``kind``, with ``status`` of its name."""
    items = []
    for obj in _config_items(service, kind):
        body = msgspec.json.decode(encode_object(obj))
        body["status"] = status(obj.metadata.name)
        items.append(body)
    return items


def cluster_queues(service: AdmissionService, request: Request) -> dict[str, Any]:
    items = _with_status(service, ClusterQueue, service.scheduler.cluster_queue_status)
    return _page(items, request)


def cohorts(service: AdmissionService, request: Request) -> dict[str, Any]:
    return _page(_with_status(service, Cohort, service.scheduler.cohort_status), request)


def local_queues(service: AdmissionService, request: Request) -> dict[str, Any]:
    items = []
    for queue in _config_items(service, LocalQueue):
        if request.namespace is not None and queue.metadata.namespace != request.namespace:
            continue
        body = msgspec.json.decode(encode_object(queue))
        body["status"] = service.scheduler.local_queue_status(
            queue.metadata.namespace, queue.metadata.name
        )
        items.append(body)
    return _page(items, request)


def pending(service: AdmissionService, request: Request) -> dict[str, Any]:
    """Pending workloads of one ClusterQueue in the order admission will try them."""
    rows = []
    bounds = _bounds(service)
    for view in service.scheduler.workload_views():
        fields = view_fields(view)
        if fields["state"] != "pending":
            continue
        if request.cluster_queue and fields["cluster_queue"] != request.cluster_queue:
            continue
        fields.update(bounds(view))
        record = service.records.get(view.ref.uid)
        rows.append(
            {
                "name": view.ref.name,
                "namespace": view.ref.namespace,
                "localQueueName": fields["local_queue"],
                "clusterQueue": fields["cluster_queue"],
                "priority": fields["priority"],
                "basePriority": fields["base_priority"],
                "positionInClusterQueue": fields["position_in_cluster_queue"],
                "positionInLocalQueue": fields["position_in_local_queue"],
                "creationTimestamp": record.created.isoformat() if record else None,
                "reason": fields["reason"],
            }
        )
        if fields["due_at"] is not None:
            rows[-1]["dueAt"] = fields["due_at"]
        rows[-1]["runsBy"] = fields.get("runs_by")
        rows[-1]["runsByReason"] = fields.get("runs_by_reason", "")
    rows.sort(key=lambda row: (row["clusterQueue"], row["positionInClusterQueue"] or 0))
    return _page(rows, request)


HANDLERS = {
    "workloads": workloads,
    "clusterqueues": cluster_queues,
    "localqueues": local_queues,
    "cohorts": cohorts,
    "pending": pending,
}


async def serve_api(service: AdmissionService) -> Served:
    async def answer(resource: str, data: bytes) -> dict[str, Any]:
        handler = HANDLERS.get(resource)
        if handler is None:
            return {"error": f"unknown resource {resource!r}"}
        return handler(service, _request_decoder.decode(data))

    # Any replica may answer (a standby's fold is as warm as the leader's): one per request.
    return await service.bus.serve_requests(f"{API_PREFIX}.*", answer, queue="admission")
