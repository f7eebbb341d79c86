"""A managed job's secrets and files on the Kubernetes backend.

Secrets: a Job created for ``berth jobs launch --secret`` refers to a Secret named
``berth-secret-<random>`` (:mod:`shared.secrets`); before the Job is created, that Secret is
made in its namespace from the ``berth-secrets`` bucket (``stringData``, type ``Opaque``),
once: a Secret of that name already there is left as it is. No value is logged.

Files: a task's ``workdir`` and local ``file_mounts`` are on the machine that launched it;
a cluster's pods cannot see them, so they are not copied, and the create says so in the log
(``task_files_not_copied``).
"""

from __future__ import annotations

from typing import Any

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import KubeConflict
from services.watcher.kube.patching import pod_templates
from shared.bus import Bus, KeyNotFound
from shared.logging import get_logger
from shared.secrets import SECRET_PREFIX, SECRETS_BUCKET, decode_secret, secret_refs
from shared.tasks import FILE_MOUNTS_ANNOTATION, WORKDIR_ANNOTATION

__all__ = ["SECRETS", "prepare_cluster"]

log = get_logger("watcher.kube")

SECRETS = Resource("", "v1", "secrets", "Secret")


async def prepare_cluster(
    client: KubeClient, bus: Bus | None, namespace: str, obj: dict[str, Any]
) -> None:
    """Make the Secrets the object's pods refer to (Berth's own, from the bucket) and say
    which task files a cluster cannot have."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    dropped = [a for a in (WORKDIR_ANNOTATION, FILE_MOUNTS_ANNOTATION) if annotations.get(a)]
    if dropped:
        name = (obj.get("metadata") or {}).get("name")
        log.warning("task_files_not_copied", workload=f"{namespace}/{name}", fields=dropped)
    names = {
        secret
        for _, pod_spec in pod_templates(obj)
        for container in pod_spec.get("containers") or []
        if isinstance(container, dict)
        for _, secret, _ in secret_refs(container.get("env"))
        if secret.startswith(SECRET_PREFIX)
    }
    if not names or bus is None:
        return
    kv = await bus.kv(SECRETS_BUCKET)
    for name in sorted(names):
        try:
            values = decode_secret((await kv.get(name)).value)
        except KeyNotFound:
            log.error("secret_missing", namespace=namespace, secret=name)
            continue
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "berth"}},
            "type": "Opaque",
            "stringData": values,
        }
        try:
            await client.create(SECRETS, namespace=namespace, body=body)
        except KubeConflict:
            continue  # made by an earlier attempt of the same job
        log.info("secret_created", namespace=namespace, secret=name, keys=sorted(values))
