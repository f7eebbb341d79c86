"""``berth.api.watcher.logs`` on a cluster: the pods' logs, read through the API server.

The same request and reply as the local backend's (:mod:`services.watcher.logs_api`), one
"file" per pod (named after the pod), oldest pod first. A Job's pods are found by the label
the Job controller gives them (``batch.kubernetes.io/job-name``) and checked by their owner;
a Pod workload is its own pod. Following is offset polling: each request reads a pod's log
from its start up to ``offset + CHUNK`` bytes (``limitBytes``) and returns what lies past the
offset, so a reply stays small; the API has no byte offset to start from.

What a cluster does not keep cannot be shown: the pods of an evicted (suspended) generation
are deleted with their logs, and so are a deleted Job's; a pod not started yet has no log.
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.watcher.kube.api import KubeClient
from services.watcher.kube.errors import KubeError, KubeNotFound, KubeRefused
from services.watcher.kube.namespaces import ALL_NAMESPACES, ManagedNamespaces
from services.watcher.kube.patching import PODS
from services.watcher.kube.reading import controller
from services.watcher.logs_api import CHUNK, LogsRequest, names_are_valid
from shared.bus import API_SUBJECT, Bus, Served
from shared.logging import get_logger

__all__ = ["JOB_NAME_LABEL", "read_pod_logs", "serve_pod_logs"]

log = get_logger("watcher.kube.logs")

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

Obj = dict[str, Any]


async def workload_pods(client: KubeClient, namespace: str, name: str) -> list[Obj]:
    """The pods of the Job (or the Pod) named ``name``, oldest first."""
    listed, _ = await client.list(
        PODS, namespace=namespace, label_selector=f"{JOB_NAME_LABEL}={name}"
    )
    pods = []
    for pod in listed:
        owner = controller(pod)
        # Checked here as well: the selector is the server's to honour, the owner is the truth.
        if owner is not None and owner.get("kind") == "Job" and owner.get("name") == name:
            pods.append(pod)
    if not pods:
        try:
            pod = await client.get(PODS, namespace=namespace, name=name)
        except KubeNotFound:
            return []
        if controller(pod) is None:
            pods.append(pod)
    return sorted(
        pods,
        key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), p["metadata"]["name"]),
    )


async def read_pod_logs(client: KubeClient, request: LogsRequest) -> dict[str, Any]:
    if not names_are_valid(request):
        return {"error": "invalid namespace or name"}
    files = []
    for pod in await workload_pods(client, request.namespace, request.name):
        pod_name = str(pod["metadata"]["name"])
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        offset = max(0, request.offsets.get(pod_name, 0))
        query = [("limitBytes", str(offset + CHUNK))]
        if containers[0].get("name"):
            query.append(("container", str(containers[0]["name"])))
        path = PODS.path(namespace=request.namespace, name=pod_name, subresource="log")
        try:
            text = await client.read_text(path, query=query)
        except (KubeRefused, KubeNotFound):
            text = ""  # not started yet (400 "waiting to start"), or deleted meanwhile
        data = text.encode()[offset:]
        files.append(
            {"file": pod_name, "data": data.decode(errors="replace"), "offset": offset + len(data)}
        )
    return {"files": files}


async def serve_pod_logs(
    bus: Bus, client: KubeClient, namespaces: ManagedNamespaces = ALL_NAMESPACES
) -> Served:
    async def answer(_: str, data: bytes) -> dict[str, Any]:
        try:
            request = msgspec.json.decode(data, type=LogsRequest)
            outside = namespaces.refusal(request.namespace)
            if outside is not None:  # the Role is not there: say why, not "403"
                return {"error": f"cannot read logs: {outside}"}
            return await read_pod_logs(client, request)
        except KubeError as error:
            log.warning("logs_unreadable", reason=str(error))
            return {"error": f"cannot read logs: {error}"}

    return await bus.serve_requests(f"{API_SUBJECT}.watcher.logs", answer)
