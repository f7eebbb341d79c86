"""Commands that change what Berth knows: apply (config), submit and delete (workloads).

Each validates everything it was given before it writes anything, so a bad document in a
multi-document file applies nothing; errors are one line naming the document and the field.

Workloads go through the bus, not into a backend's store: ``berth submit`` sends a
``SubmitWorkload`` per object and ``berth delete workload`` a ``RemoveWorkload``, which the
watcher carries out in whichever backend is active (its local objects bucket, or the API
server of a cluster). Success is reported once the event stream has stored the command.
"""

from __future__ import annotations

import secrets
import string
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from berth_cli.client import CliError, connect, key_exists, query_all
from berth_cli.config_fields import unsupported_object
from berth_cli.ignored import unsupported
from berth_cli.kinds import config_names
from berth_cli.workload_schema import validate_fields
from shared.bus import CONFIG_BUCKET, STREAM, Bus, KeyNotFound, NotFound, bus_call
from shared.config import (
    KIND_PLURALS,
    VOLATILE_METADATA,
    ConfigError,
    ConfigObject,
    config_key,
    encode_object,
    is_config_kind,
    load_documents,
    object_key,
    parse_object,
    place_of,
)
from shared.events import RemoveWorkload, SubmitWorkload, WorkloadRef, subject_token
from shared.names import InvalidName, check_generate_name, check_name, check_namespace
from shared.pod_groups import pod_group
from shared.workloads import (
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WORKLOAD_KINDS,
    WorkloadError,
    check_identity,
    resource_name,
    workload_spec,
)
from shared.yaml_input import YamlInputError, read_input

__all__ = [
    "CONFIG_NAMES",
    "apply_config",
    "check_priority_classes",
    "check_references",
    "delete_config",
    "delete_workload",
    "prepare_workloads",
    "read_documents",
    "submit_workloads",
]


def read_documents(path: str) -> tuple[list[dict[str, Any]], str]:
    """Read a YAML file (or ``-`` for stdin) into its documents (at most 1 MiB)."""
    try:
        text, source = read_input(path)
    except YamlInputError as error:
        raise CliError(str(error)) from error
    try:
        documents = load_documents(text, source=source)
    except ConfigError as error:
        raise CliError(str(error)) from error
    if not documents:
        raise CliError(f"{source}: no objects found")
    return documents, source


# --- apply -----------------------------------------------------------------------------------


# What a server sets and a client's apply does not: `berth get -o yaml` prints them, and
# applying that output again must not change the stored object (kubectl's server ignores
# them): the volatile fields, and the uid and creationTimestamp of the object read back.
_SERVER_SET_METADATA = VOLATILE_METADATA | {"creationTimestamp", "uid"}


def as_applied(document: dict[str, Any]) -> dict[str, Any]:
    """A config object as `berth apply` stores it: without its ``status`` and the metadata an
    API server sets (:data:`_SERVER_SET_METADATA`), so an exported object applies unchanged."""
    applied = {key: value for key, value in document.items() if key != "status"}
    metadata = applied.get("metadata")
    if isinstance(metadata, dict):
        kept = {key: value for key, value in metadata.items() if key not in _SERVER_SET_METADATA}
        applied["metadata"] = kept
    return applied


def parse_config(documents: list[dict[str, Any]], source: str) -> list[ConfigObject]:
    objects = []
    for index, raw in enumerate(documents):
        document = as_applied(raw)
        where = place_of(documents, source, index)
        if document.get("kind") in WORKLOAD_KINDS and not is_config_kind(str(document.get("kind"))):
            raise CliError(f"{where}: {document['kind']} is a workload; use `berth submit -f`")
        if unsupported_object(document) is not None:
            continue  # a Kueue object Berth does not model: warned at apply, not refused
        if (why := unsupported(document.get("kind"))) is not None:
            raise CliError(f"{where}: {document['kind']} is not supported: {why}")
        try:
            objects.append(parse_object(document, where=where))
        except ConfigError as error:
            raise CliError(str(error)) from error
    return objects


async def apply_config(url: str, documents: list[dict[str, Any]], source: str) -> list[str]:
    """Store each object in the config bucket; returns kubectl-style result lines."""
    objects = parse_config(documents, source)
    lines = []
    async with connect(url) as bus:
        kv = await bus.kv(CONFIG_BUCKET)
        for obj in objects:
            key = object_key(obj)
            value = encode_object(obj)
            try:
                existing = await kv.get(key)
                before = existing.value
            except KeyNotFound:
                before = None
            resource = f"{KIND_PLURALS[type(obj).__name__]}/{obj.metadata.name}"
            if before == value:
                lines.append(f"{resource} unchanged")
                continue
            await kv.put(key, value)
            lines.append(f"{resource} {'configured' if before else 'created'}")
    return lines


# --- submit ----------------------------------------------------------------------------------


def _suffix() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(5))


def prepare_workload(
    document: dict[str, Any], *, namespace: str | None, where: str, validate: str = "strict"
) -> dict[str, Any]:
    """Validate a workload object (its unknown fields as ``validate`` says: kubectl's
    ``--validate``, :func:`validate_fields`) and fill in what an API server would: name,
    uid, times."""
    obj: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(document))  # a deep copy
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if isinstance(kind, str) and kind not in WORKLOAD_KINDS and kind in _BUILT_BY_BERTH:
        raise CliError(f"{where}: {_BUILT_BY_BERTH[kind]}")
    if (why := unsupported(kind)) is not None:
        raise CliError(f"{where}: {kind} is not supported: {why}")
    try:
        validate_fields(obj, validate, where)  # first: a typo is named, not what it hid
        workload_spec(obj)
        group = pod_group(obj)
    except WorkloadError as error:
        raise CliError(f"{where}: {error}") from error
    if group is not None:
        _check_names(where, lambda: check_name(group[0], "kueue.x-k8s.io/pod-group-name"))
    metadata = obj.setdefault("metadata", {}) or {}
    obj["metadata"] = metadata
    own_namespace = metadata.get("namespace")
    if namespace and own_namespace and own_namespace != namespace:
        raise CliError(
            f"{where}: the namespace from the provided object {own_namespace!r} does not match"
            f" the namespace {namespace!r}"
        )
    metadata["namespace"] = namespace or own_namespace or "default"
    if not metadata.get("name"):
        prefix = metadata.get("generateName")
        if not prefix:
            raise CliError(f"{where}: missing field `metadata.name` (or `metadata.generateName`)")
        _check_names(where, lambda: check_generate_name(prefix))
        metadata["name"] = f"{prefix}{_suffix()}"
    metadata["uid"] = str(uuid.uuid4())
    metadata["creationTimestamp"] = datetime.now(UTC).isoformat()
    _check_names(where, lambda: check_identity(obj))  # as Kubernetes validates them
    obj.pop("status", None)
    return obj


# Kinds that are Berth's own view of something a user submits.
_BUILT_BY_BERTH = {
    "PodGroup": "PodGroup is what Berth makes of a pod group: submit its Pods, each labelled"
    " kueue.x-k8s.io/pod-group-name"
}


def check_pod_groups(prepared: list[tuple[dict[str, Any], str]]) -> None:
    """The Pods of one pod group given together agree on their group's size and queue, and
    are no more than that size (Kueue's webhook checks the same)."""
    seen: dict[tuple[str, str], tuple[int, str, int]] = {}  # -> (total, queue, pods)
    for obj, where in prepared:
        group = pod_group(obj)
        if group is None:
            continue
        name, total = group
        key = (obj["metadata"]["namespace"], name)
        queue = (obj["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL) or ""
        known_total, known_queue, pods = seen.get(key, (total, queue, 0))
        if total != known_total:
            raise CliError(
                f"{where}: pod group {name!r}: total count {total} differs from {known_total}"
                " given by another of its pods"
            )
        if queue != known_queue:
            raise CliError(f"{where}: pod group {name!r}: all its pods must name one queue")
        if pods + 1 > total:
            raise CliError(f"{where}: pod group {name!r} has {total} pods; this one is too many")
        seen[key] = (total, queue, pods + 1)


def prepare_workloads(
    files: list[tuple[list[dict[str, Any]], str]],
    *,
    namespace: str | None,
    validate: str = "strict",
) -> list[tuple[dict[str, Any], str]]:
    """Every workload document of the files (documents, source) prepared as `berth submit`
    sends it (``prepare_workload``), each with where it stands ("<source>: document <n>"); a
    configuration kind is refused (it goes through `berth apply -f`), and the Pods of one pod
    group must agree across all of them (``check_pod_groups``)."""
    prepared = []
    for documents, source in files:
        for index, document in enumerate(documents):
            where = place_of(documents, source, index)
            kind = str(document.get("kind"))
            if kind not in WORKLOAD_KINDS and is_config_kind(kind):
                raise CliError(f"{where}: {kind} is configuration; use `berth apply -f`")
            obj = prepare_workload(document, namespace=namespace, where=where, validate=validate)
            prepared.append((obj, where))
    check_pod_groups(prepared)
    return prepared


async def check_references(kv: Any, obj: dict[str, Any], where: str) -> None:
    """The queue and priority class a workload names must exist, as Kueue's webhook checks."""
    metadata = obj["metadata"]
    namespace = metadata["namespace"]
    labels = metadata.get("labels") or {}
    queue = labels.get(QUEUE_NAME_LABEL) or ""
    if queue:
        if not await key_exists(kv, config_key("LocalQueue", queue, namespace)):
            raise CliError(
                f"{where}: label {QUEUE_NAME_LABEL}: LocalQueue {queue!r} not found in"
                f" namespace {namespace!r}"
            )
    elif not await key_exists(kv, config_key("LocalQueue", "default", namespace)):
        raise CliError(
            f"{where}: no queue: set label {QUEUE_NAME_LABEL}, or create a LocalQueue named"
            f" 'default' in namespace {namespace!r}"
        )
    await check_priority_classes(kv, obj, where)


async def check_priority_classes(kv: Any, obj: dict[str, Any], where: str) -> None:
    """The WorkloadPriorityClass label and the pods' PriorityClass must exist."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    priority_class = labels.get(PRIORITY_CLASS_LABEL)
    if priority_class and not await key_exists(
        kv, config_key("WorkloadPriorityClass", priority_class)
    ):
        raise CliError(
            f"{where}: label {PRIORITY_CLASS_LABEL}: WorkloadPriorityClass {priority_class!r}"
            " not found"
        )
    priority_class_name = workload_spec(obj).priority_class_name
    if priority_class_name and not await key_exists(
        kv, config_key("PriorityClass", priority_class_name)
    ):
        raise CliError(
            f"{where}: priorityClassName: PriorityClass {priority_class_name!r} not found"
        )


async def submit_workloads(
    url: str,
    documents: list[dict[str, Any]],
    source: str,
    *,
    namespace: str | None,
    validate: str = "strict",
) -> list[str]:
    """Send each workload object to the watcher, as `kubectl create` would create it."""
    prepared = prepare_workloads([(documents, source)], namespace=namespace, validate=validate)
    lines = []
    async with connect(url) as bus:
        config = await bus.kv(CONFIG_BUCKET)
        for obj, where in prepared:
            await check_references(config, obj, where)
        await _require_stream(bus)
        names: set[tuple[str, str]] = set()
        for obj, where in prepared:
            identity = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if identity in names or await workload_exists(bus, *identity):
                raise CliError(
                    f"{where}: workload {identity[1]!r} already exists in namespace {identity[0]!r}"
                )
            names.add(identity)
            group = pod_group(obj)
            if group is not None and await workload_exists(bus, identity[0], group[0]):
                raise CliError(
                    f"{where}: pod group {group[0]!r} is complete already in namespace"
                    f" {identity[0]!r}: a pod of it cannot be added"
                )
        for obj, _ in prepared:
            metadata = obj["metadata"]
            ref = WorkloadRef(metadata["namespace"], metadata["name"], metadata["uid"])
            # Awaits the stream's ack: "created" means stored, and the watcher will act on it.
            await bus.publish(
                SubmitWorkload(id=f"submit-{ref.uid}", source="cli", workload=ref, object=obj)
            )
            lines.append(f"{resource_name(obj['kind'])}/{metadata['name']} created")
    return lines


async def _require_stream(bus: Bus) -> None:
    """The event stream exists once a service has started: without it nothing would act."""
    try:
        await bus_call(bus.js.stream_info(STREAM))
    except NotFound as error:
        raise CliError(
            "Berth's event stream does not exist: no service has started (is `berth up` running?)"
        ) from error


async def workload_exists(bus: Bus, namespace: str, name: str) -> bool:
    """Whether a workload of that name exists or is being created, by the event stream: its
    newest creation (a ``berth submit`` or recovery command, or the watcher's
    ``WorkloadSubmitted``) is newer than its newest removal (a ``berth delete`` or recovery
    command, or ``WorkloadDeleted``).

    Why the stream: the objects live in the active backend (a bucket only the local backend
    reads, or a cluster), which the CLI does not read; every change to them passes here.
    """
    tail = f"{subject_token(namespace)}.{subject_token(name)}"

    async def newest(verbs: tuple[str, ...]) -> int:
        sequences = [0]
        for verb in verbs:
            try:
                message = await bus_call(bus.js.get_last_msg(STREAM, f"berth.{verb}.{tail}"))
            except NotFound:
                continue
            sequences.append(int(message.seq or 0))
        return max(sequences)

    created = await newest(("cmd.submit", "cmd.create", "wl.submitted"))
    removed = await newest(("cmd.remove", "cmd.delete", "wl.deleted"))
    return created > removed


# --- delete ----------------------------------------------------------------------------------


def _check_names(where: str, check: Callable[[], object]) -> None:
    """Run a name check; its one-line error, prefixed with ``where``, is the CLI's."""
    try:
        check()
    except (InvalidName, WorkloadError) as error:
        raise CliError(f"{where}: {error}" if where else str(error)) from None


async def delete_workload(url: str, name: str, namespace: str) -> str:
    """Ask the watcher to delete the workload; it stops what runs of it."""
    _check_names("", lambda: (check_name(name, "name"), check_namespace(namespace, "namespace")))
    async with connect(url) as bus:
        await _require_stream(bus)
        if not await workload_exists(bus, namespace, name):
            raise CliError(f'workload "{name}" not found in namespace "{namespace}"')
        ref = WorkloadRef(namespace, name, "")
        await bus.publish(RemoveWorkload(source="cli", workload=ref))
    return f'workload "{name}" deleted'


# kubectl-style names (singular, plural, short) -> config kind: the CLI's one table
CONFIG_NAMES = config_names()


async def delete_config(url: str, kind: str, name: str, namespace: str) -> str:
    """Delete one config object; a ClusterQueue that still holds quota is refused."""
    namespaced = kind == "LocalQueue"
    _check_names("", lambda: check_name(name, "name"))
    if namespaced:
        _check_names("", lambda: check_namespace(namespace, "namespace"))
    key = config_key(kind, name, namespace if namespaced else None)
    resource = f"{KIND_PLURALS[kind]}/{name}"
    async with connect(url) as bus:
        config = await bus.kv(CONFIG_BUCKET)
        if not await key_exists(config, key):
            where = f' in namespace "{namespace}"' if namespaced else ""
            raise CliError(f"{resource} not found{where}")
        if kind == "ClusterQueue":
            queues = await query_all(bus, "clusterqueues")
            status: dict[str, Any] = next(
                (q["status"] for q in queues if q["metadata"]["name"] == name), {}
            )
            holding = int(status.get("reservingWorkloads", 0))
            if holding:
                raise CliError(
                    f"{resource} has {holding} workload(s) holding quota; delete them or let them"
                    " finish first (Kueue keeps such a ClusterQueue until they are gone)"
                )
        await config.delete(key)
    return f"{resource} deleted"
