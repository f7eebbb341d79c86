"""A mutating admission webhook: labelled workloads are born stopped.

Without it a Job starts its pods before the watcher can suspend it, and a Pod can never be
gated after creation. So, on CREATE (AdmissionReview v1), for an object labelled with
``kueue.x-k8s.io/queue-name``: a Job, RayJob, JobSet, RayCluster or AppWrapper gets
``spec.suspend: true``, a Kubeflow job ``spec.runPolicy.suspend: true``; a Pod (not owned by a
controller: a Job's pods are managed through their Job) gets the ``kueue.x-k8s.io/admission``
scheduling gate, and so do the pod templates of a Deployment, StatefulSet or
LeaderWorkerSet. The answer is a JSON patch; anything else is allowed untouched.

Settings: ``BERTH_WEBHOOK_CERT`` / ``BERTH_WEBHOOK_KEY`` (PEM files; the API server only
talks TLS to webhooks) and ``BERTH_WEBHOOK_PORT`` (9443).
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from services.watcher.kube.kinds import (
    OTHER_RESOURCES,
    gate_kind,
    is_suspended,
    suspend_patch,
    templates,
)
from services.watcher.kube.patching import ADMISSION_GATE
from shared.logging import get_logger
from shared.workloads import QUEUE_NAME_LABEL

__all__ = ["WebhookSettings", "make_app", "mutations", "serve_webhook", "tls_context"]

log = get_logger("watcher.webhook")


@dataclass(frozen=True)
class WebhookSettings:
    cert: str = ""
    key: str = ""
    port: int = 9443
    host: str = "0.0.0.0"

    @property
    def tls_configured(self) -> bool:
        return bool(self.cert and self.key)

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> WebhookSettings:
        return cls(
            cert=env.get("BERTH_WEBHOOK_CERT", ""),
            key=env.get("BERTH_WEBHOOK_KEY", ""),
            port=int(env.get("BERTH_WEBHOOK_PORT", "9443")),
            host=env.get("BERTH_WEBHOOK_HOST", "0.0.0.0"),
        )


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server TLS context; raises ``OSError``/``ssl.SSLError`` naming a bad file."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def mutations(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch operations for one object being created (empty: leave it alone)."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict) or not labels.get(QUEUE_NAME_LABEL):
        return []
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        return []  # the API server would not have let it through
    if kind in ("Job", "RayJob"):
        if spec.get("suspend") is True:
            return []
        # "add" on an existing member replaces it (RFC 6902), so this covers suspend: false.
        return [{"op": "add", "path": "/spec/suspend", "value": True}]
    if kind == "Pod":
        if any(owner.get("controller") for owner in metadata.get("ownerReferences") or []):
            return []
        return _gate(spec, "/spec")
    if gate_kind(kind):  # every pod its controller makes is born gated
        operations = []
        for _, path in templates(obj):
            pod_spec: Any = obj
            for step in path:
                pod_spec = pod_spec[step]
            operations += _gate(pod_spec, "/" + "/".join(_pointer(step) for step in path))
        return operations
    if isinstance(kind, str) and kind in OTHER_RESOURCES:  # its own suspend field (kinds.py)
        if is_suspended(obj):
            return []
        patch = suspend_patch(obj, True)
        if "runPolicy" in patch and not isinstance(spec.get("runPolicy"), dict):
            return [{"op": "add", "path": "/spec/runPolicy", "value": patch["runPolicy"]}]
        if "runPolicy" in patch:
            return [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
        return [{"op": "add", "path": "/spec/suspend", "value": True}]
    return []


def _gate(pod_spec: dict[str, Any], pointer: str) -> list[dict[str, Any]]:
    """The operation adding Kueue's admission gate to the pod spec at ``pointer``, if needed."""
    gates = pod_spec.get("schedulingGates") if isinstance(pod_spec, dict) else None
    if not isinstance(gates, list):
        return [
            {"op": "add", "path": f"{pointer}/schedulingGates", "value": [{"name": ADMISSION_GATE}]}
        ]
    if any(isinstance(gate, dict) and gate.get("name") == ADMISSION_GATE for gate in gates):
        return []
    return [
        {"op": "add", "path": f"{pointer}/schedulingGates/-", "value": {"name": ADMISSION_GATE}}
    ]


def _pointer(step: str | int) -> str:
    return str(step).replace("~", "~0").replace("/", "~1")  # RFC 6901


async def _mutate(request: web.Request) -> web.Response:
    try:
        review = await request.json()
        admission = review["request"]
        uid = admission["uid"]
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "expected an AdmissionReview v1"}, status=400)
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    obj = admission.get("object") or {}
    if admission.get("operation", "CREATE") == "CREATE" and isinstance(obj, dict):
        operations = mutations(obj)
        if operations:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(operations).encode()).decode()
            log.info(
                "webhook_mutated",
                kind=obj.get("kind"),
                namespace=admission.get("namespace"),
                name=(obj.get("metadata") or {}).get("name") or admission.get("name"),
            )
    return web.json_response(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/mutate", _mutate)
    return app


async def serve_webhook(
    settings: WebhookSettings, *, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    """Start serving; the caller cleans the returned runner up. TLS when configured."""
    if ssl_context is None and settings.tls_configured:
        ssl_context = tls_context(settings.cert, settings.key)
    runner = web.AppRunner(make_app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=ssl_context)
    await site.start()
    log.info("webhook_listening", port=settings.port, tls=ssl_context is not None)
    return runner
