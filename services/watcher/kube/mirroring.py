"""Mirror the cluster's Kueue configuration (and Namespaces) into the config bucket.

In a cluster, ClusterQueues and friends are applied with kubectl; admission reads them from
the ``berth-config`` bucket as it reads ``berth apply``'s. Each object is validated with
:func:`shared.config.parse_object` (an invalid one is logged with the reason and skipped, the
previous valid version stays), stored without its status and volatile metadata (Kueue
rewrites ClusterQueue status all the time; that must not churn the bucket), and marked with
:data:`SOURCE_ANNOTATION` so a re-list only ever deletes keys that came from the cluster.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

import msgspec
from nats.js.kv import KeyValue

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.watching import (
    EventType,
    Listed,
    Malformed,
    WatchSettings,
    watch_objects,
)
from shared.bus import BucketWatch, KeyNotFound, live_value
from shared.config import (
    VOLATILE_METADATA,
    ConfigError,
    config_key,
    config_key_prefix,
    encode_object,
    object_key,
    parse_object,
)
from shared.logging import get_logger

__all__ = ["CONFIG_RESOURCES", "SOURCE_ANNOTATION", "ConfigMirror", "follow_config"]

log = get_logger("watcher.kube.mirroring")

SOURCE_ANNOTATION = "berth.dev/source"
SOURCE_KUBERNETES = "kubernetes"

_KUEUE = "kueue.x-k8s.io"


def _kueue(
    plural: str, kind: str, *, namespaced: bool = False, alpha: bool = False
) -> list[Resource]:
    versions = ["v1beta2", "v1beta1"] + (["v1alpha1"] if alpha else [])
    return [Resource(_KUEUE, version, plural, kind, namespaced) for version in versions]


# kind -> alternatives, preferred first (the first one the server serves is watched)
CONFIG_RESOURCES: dict[str, list[Resource]] = {
    "Namespace": [Resource("", "v1", "namespaces", "Namespace", namespaced=False)],
    "ResourceFlavor": _kueue("resourceflavors", "ResourceFlavor"),
    "ClusterQueue": _kueue("clusterqueues", "ClusterQueue"),
    "LocalQueue": _kueue("localqueues", "LocalQueue", namespaced=True),
    "WorkloadPriorityClass": _kueue("workloadpriorityclasses", "WorkloadPriorityClass"),
    "Cohort": _kueue("cohorts", "Cohort", alpha=True),
    # A ClusterQueue's admission checks must exist, or it is inactive (docs/admission-checks.md).
    "AdmissionCheck": _kueue("admissionchecks", "AdmissionCheck"),
    "PriorityClass": [
        Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
    ],
}

def key_for(kind: str, obj: dict[str, Any]) -> str:
    """The bucket key, without parsing (for deletions of objects that may be invalid)."""
    metadata = obj.get("metadata") or {}
    return config_key(kind, str(metadata.get("name")), metadata.get("namespace"))


class ConfigMirror:
    def __init__(self, kv: KeyValue, *, malformed: Malformed | None = None) -> None:
        self.kv = kv
        self.malformed = malformed  # an object Berth refuses: a dead letter, else a log line
        self._stored: dict[str, bytes] = {}  # what we know the bucket holds, to skip no-ops

    async def apply(self, kind: str, obj: dict[str, Any]) -> None:
        document = _cleaned(kind, obj)
        where = f"cluster {kind} {key_for(kind, obj)}"
        try:
            parsed = parse_object(document, where=where)
        except ConfigError as error:
            if self.malformed is None:
                log.error("invalid_config_object", kind=kind, reason=str(error))
            else:
                await self.malformed(where, str(error), json.dumps(obj, default=str).encode())
            return
        key = object_key(parsed)
        value = encode_object(parsed)
        if await self._current(key) == value:
            return
        await self.kv.put(key, value)
        self._stored[key] = value
        log.info("config_mirrored", key=key)

    async def remove(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_for(kind, obj)
        if await self._is_ours(key):
            await self.kv.delete(key)
            self._stored.pop(key, None)
            log.info("config_removed", key=key)

    async def resync(
        self, kind: str, objects: list[dict[str, Any]], *, namespace: str | None = None
    ) -> None:
        """After a (re-)list: mirror every object, delete ours that the cluster no longer has
        (in ``namespace`` only, for a list of one namespace: the others' lists say theirs)."""
        for obj in objects:
            await self.apply(kind, obj)
        present = {key_for(kind, obj) for obj in objects}
        prefix = config_key_prefix(kind, namespace)
        # The bucket's entries with their values, in one pass: kv.keys() can end early
        # while keys change (a `berth apply` meanwhile), and a get per key was one more trip.
        for entry in await BucketWatch.snapshot(self.kv):
            value = live_value(entry)
            if value is None or not entry.key.startswith(prefix) or entry.key in present:
                continue
            self._stored[entry.key] = value
            if await self._is_ours(entry.key):
                await self.kv.delete(entry.key)
                self._stored.pop(entry.key, None)
                log.info("config_removed", key=entry.key, reason="absent from list")

    async def _current(self, key: str) -> bytes | None:
        if key not in self._stored:
            try:
                entry = await self.kv.get(key)
            except KeyNotFound:
                return None
            if entry.value is None:
                return None
            self._stored[key] = entry.value
        return self._stored[key]

    async def _is_ours(self, key: str) -> bool:
        """Only keys the cluster wrote are deleted; ``berth apply``'s are left alone."""
        value = await self._current(key)
        if not value:
            return False
        try:
            stored = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return False
        annotations = (stored.get("metadata") or {}).get("annotations") or {}
        return bool(annotations.get(SOURCE_ANNOTATION) == SOURCE_KUBERNETES)


def _cleaned(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in VOLATILE_METADATA}
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        # kubectl's copy of the whole object: big and useless here
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    annotations[SOURCE_ANNOTATION] = SOURCE_KUBERNETES
    metadata["annotations"] = annotations
    document = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    document["metadata"] = metadata
    document["kind"] = kind
    return document


async def follow_config(
    client: KubeClient,
    mirror: ConfigMirror,
    kind: str,
    alternatives: list[Resource],
    *,
    settings: WatchSettings,
    synced: asyncio.Event,
    namespace: str | None = None,
) -> None:
    """List-watch one configuration kind (in one namespace, or all) into the bucket for
    ever; ``synced`` once listed."""
    stream = watch_objects(
        client, alternatives, namespace=namespace, settings=settings, malformed=mirror.malformed
    )
    async with aclosing(stream) as items:
        async for item in items:
            if isinstance(item, Listed):
                await mirror.resync(kind, item.objects, namespace=namespace)
                synced.set()
            elif item.type is EventType.DELETED:
                await mirror.remove(kind, item.object)
            else:
                await mirror.apply(kind, item.object)
