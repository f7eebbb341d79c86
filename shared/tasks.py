"""From what ``berth jobs launch FILE`` is given to the batch/v1 Job that Berth runs.

The file is either a SkyPilot task (``name``, ``resources``, ``setup``, ``run``, ``envs``,
``num_nodes``, ``experimental.config_overrides``...) or a batch/v1 Job, which passes through.
A task becomes a Job with one container named ``task`` whose command is a small ``sh``
wrapper: it runs ``setup`` (exiting :data:`SETUP_FAILED_EXIT_CODE` if that fails), then
``exec``s ``run``, whose exit code is the job's. Both scripts travel in environment variables
(``BERTH_TASK_SETUP``, ``BERTH_TASK_RUN``), never interpolated into the command, so no quoting
in them can break it. Each runs under ``bash`` when the image has it (SkyPilot's shell), else
``sh``.

SkyPilot spellings follow ``sky/utils/schemas.py`` and ``sky/resources.py``:

- ``cpus``: ``4``, ``0.5``, ``"4"``, ``"4+"`` ("at least": the number is requested);
- ``memory``: a bare number is GB, SkyPilot's GB being 2**30 bytes (``"16"``, ``16``,
  ``"16+"`` -> ``16Gi``); units ``KB/KI/MB/MI/GB/GI/TB/TI/PB/PI`` in any case, all binary
  (``"32GB"`` -> ``32Gi``, ``"512MB"`` -> ``512Mi``);
- ``accelerators``: ``"T4"``, ``"T4:4"``, ``{"T4": 4}``, a list ``["T4:4", "L4:4"]`` or the
  strings ``"{T4:4, L4:4}"`` / ``"[T4:4, L4:4]"``. Every model maps to ``nvidia.com/gpu``;
  the model goes in the label ``berth.dev/accelerator``. Of several candidates Berth cannot
  choose by model, so the first is used (and the rest reported in ``ignored``);
- ``job_recovery``: a strategy name, or ``{strategy, max_restarts_on_errors, ...}``;
- ``experimental.config_overrides`` (older SkyPilot) or ``config`` (newer): only
  ``kubernetes.pod_config`` is applied, merged into the pod template as SkyPilot does
  (``spec.priorityClassName``, ``metadata.labels``, tolerations, ``containers[0]``...).

Fields SkyPilot accepts but Berth cannot honour (``workdir``, ``file_mounts``, ``region``,
``use_spot``...) are accepted and listed in :attr:`ManagedJobSpec.ignored` for the CLI to warn
about; unknown fields are errors. Every :class:`TaskError` is one line naming the field.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from pathlib import PurePath
from typing import Any

from shared.quantities import format_quantity
from shared.workloads import (
    PRIORITY_CLASS_LABEL,
    WorkloadError,
    workload_spec,
)
from shared.yaml_input import YamlInputError, load_all

__all__ = [
    "ACCELERATOR_LABEL",
    "GPU_RESOURCE",
    "MAX_RESTARTS_ANNOTATION",
    "SETUP_FAILED_EXIT_CODE",
    "TASK_CONTAINER",
    "TASK_IMAGE",
    "ManagedJobSpec",
    "TaskError",
    "load_managed_job",
]

SETUP_FAILED_EXIT_CODE = 86  # the job's process exits with this when `setup` failed
ACCELERATOR_LABEL = "berth.dev/accelerator"
MAX_RESTARTS_ANNOTATION = "berth.dev/max-restarts-on-errors"
GPU_RESOURCE = "nvidia.com/gpu"
TASK_CONTAINER = "task"
TASK_IMAGE = "berth/task"
SETUP_ENV = "BERTH_TASK_SETUP"
RUN_ENV = "BERTH_TASK_RUN"

# The container's command: `sh -c WRAPPER`. It reads the scripts from the environment only.
WRAPPER = f"""\
if command -v bash >/dev/null 2>&1; then berth_shell=bash; else berth_shell=sh; fi
export SKYPILOT_NODE_RANK="${{JOB_COMPLETION_INDEX:-0}}"
if [ -n "${{{SETUP_ENV}:-}}" ]; then
  "$berth_shell" -c "${SETUP_ENV}" || exit {SETUP_FAILED_EXIT_CODE}
fi
if [ -n "${{{RUN_ENV}:-}}" ]; then
  exec "$berth_shell" -c "${RUN_ENV}"
fi
exit 0
"""

_TASK_FIELDS = {
    "name",
    "workdir",
    "event_callback",
    "num_nodes",
    "resources",
    "file_mounts",
    "setup",
    "run",
    "envs",
    "secrets",
    "inputs",
    "outputs",
    "volumes",
    "config",
    "experimental",
}
# Accepted, but with no effect on a Berth job.
_IGNORED_TASK_FIELDS = ("workdir", "event_callback", "file_mounts", "inputs", "outputs", "volumes")
_RESOURCE_FIELDS = {
    "cloud",
    "region",
    "zone",
    "infra",
    "cpus",
    "memory",
    "accelerators",
    "instance_type",
    "use_spot",
    "job_recovery",
    "spot_recovery",
    "volumes",
    "disk_size",
    "ephemeral_storage",
    "disk_tier",
    "network_tier",
    "local_disk",
    "max_hourly_cost",
    "ports",
    "labels",
    "accelerator_args",
    "image_id",
    "autostop",
    "priority",
    "priority_class",
    "any_of",
    "ordered",
}
_IGNORED_RESOURCE_FIELDS = (
    "region",
    "zone",
    "instance_type",
    "use_spot",
    "volumes",
    "disk_size",
    "ephemeral_storage",
    "disk_tier",
    "network_tier",
    "local_disk",
    "max_hourly_cost",
    "ports",
    "accelerator_args",
    "autostop",
    "priority",
    "priority_class",
)
# SkyPilot's memory units (sky/skylet/constants.py MEMORY_SIZE_UNITS): all binary.
_MEMORY_UNITS = {
    "kb": 1 << 10,
    "ki": 1 << 10,
    "mb": 1 << 20,
    "mi": 1 << 20,
    "gb": 1 << 30,
    "gi": 1 << 30,
    "tb": 1 << 40,
    "ti": 1 << 40,
    "pb": 1 << 50,
    "pi": 1 << 50,
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$")
_NUMBER = re.compile(r"^(?:\d+\.?\d*|\.\d+)$")
# Set by the caller (recovery), not by the file.
_SERVER_METADATA = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "ownerReferences",
)


class TaskError(ValueError):
    """A file that cannot become a managed job; one line naming the field."""


@dataclass(frozen=True)
class ManagedJobSpec:
    """What ``berth jobs launch`` submits: a Job plus what ``berth jobs queue`` shows."""

    name: str  # -n NAME, else the task's `name` (a Job's metadata.name), else the file's stem
    job: dict[str, Any]  # batch/v1 Job without metadata.name/namespace/uid
    resources: str  # "1x[CPU:4]", "1x[T4:4]", "2x[CPU:6, T4:1]"
    max_restarts_on_errors: int
    queue_name: str  # "" = the namespace's default LocalQueue
    priority_class: str  # kueue.x-k8s.io/priority-class label
    priority_class_name: str  # pod spec.priorityClassName
    ignored: tuple[str, ...] = field(default=())  # accepted fields Berth does not honour


class _Fail(Exception):
    """Internal: a field path and a message, turned into a TaskError with the source."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message


def load_managed_job(
    text: str,
    *,
    source: str,
    name: str | None = None,
    priority_class: str | None = None,
) -> ManagedJobSpec:
    """Parse a SkyPilot task or a batch/v1 Job; raises :class:`TaskError` naming the field.

    ``name`` (``-n``) overrides the task's name; ``priority_class`` (``--priority-class``)
    sets the ``kueue.x-k8s.io/priority-class`` label, overriding the file's.
    """
    document = _load_yaml(text, source)
    try:
        if priority_class is not None:
            _check_label_value(priority_class, "--priority-class")
        if name is not None and not name.strip():
            raise _Fail("--name", "must not be empty")
        if "kind" in document:
            return _from_job(document, source, name, priority_class)
        return _from_task(document, source, name, priority_class)
    except _Fail as failure:
        raise TaskError(f"{source}: `{failure.path}`: {failure.message}") from None


# --- YAML -----------------------------------------------------------------------------------


def _load_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        documents = [doc for doc in load_all(text, source=source) if doc is not None]
    except YamlInputError as error:
        raise TaskError(str(error)) from None
    if not documents:
        raise TaskError(f"{source}: empty file: expected a SkyPilot task or a batch/v1 Job")
    if len(documents) > 1:
        raise TaskError(
            f"{source}: {len(documents)} YAML documents: expected one task or Job"
            " (SkyPilot pipelines are not supported)"
        )
    document = documents[0]
    if not isinstance(document, dict):
        raise TaskError(
            f"{source}: expected a mapping (a SkyPilot task or a batch/v1 Job),"
            f" got {type(document).__name__}"
        )
    for key in document:
        if not isinstance(key, str):
            raise TaskError(f"{source}: `{key!r}`: field names must be strings")
    return document


# --- batch/v1 Job passthrough ---------------------------------------------------------------


def _from_job(
    document: dict[str, Any], source: str, name: str | None, priority_class: str | None
) -> ManagedJobSpec:
    if document.get("kind") != "Job":
        raise _Fail(
            "kind",
            f"{document.get('kind')!r} cannot be launched as a managed job"
            " (give a SkyPilot task or a batch/v1 Job)",
        )
    job = copy.deepcopy(document)
    job.pop("status", None)
    metadata = job.get("metadata")
    if metadata is None:
        metadata = job["metadata"] = {}
    if not isinstance(metadata, dict):
        raise _Fail("metadata", "must be a mapping")
    job_name = metadata.get("name")
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    labels = _string_map(metadata.get("labels"), "metadata.labels")
    if priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    if labels:
        metadata["labels"] = labels
    annotations = _string_map(metadata.get("annotations"), "metadata.annotations")
    max_restarts = 0
    if MAX_RESTARTS_ANNOTATION in annotations:
        raw = annotations[MAX_RESTARTS_ANNOTATION]
        if not raw.isdigit():
            raise _Fail(
                f"metadata.annotations.{MAX_RESTARTS_ANNOTATION}",
                f"must be a non-negative integer, got {raw!r}",
            )
        max_restarts = int(raw)
    spec = _validate(job, source)
    pod_set = spec.pod_sets[0]
    template_labels = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    model = labels.get(ACCELERATOR_LABEL) or (template_labels.get("labels") or {}).get(
        ACCELERATOR_LABEL
    )
    cpu = pod_set.requests.get("cpu", 0)
    gpus = pod_set.requests.get(GPU_RESOURCE, 0)
    return ManagedJobSpec(
        name=name or (job_name if isinstance(job_name, str) and job_name else _stem(source)),
        job=job,
        resources=_summary(
            pod_set.count,
            _format_number(cpu) if cpu else None,
            (str(model or "GPU"), _format_number(gpus)) if gpus else None,
        ),
        max_restarts_on_errors=max_restarts,
        queue_name=spec.queue_name,
        priority_class=spec.priority_class,
        priority_class_name=spec.priority_class_name,
    )


def _validate(job: dict[str, Any], source: str) -> Any:
    try:
        return workload_spec(job)
    except WorkloadError as error:
        raise TaskError(f"{source}: {error}") from None


# --- SkyPilot task --------------------------------------------------------------------------


def _from_task(
    task: dict[str, Any], source: str, name: str | None, priority_class: str | None
) -> ManagedJobSpec:
    for key in task:
        if key not in _TASK_FIELDS:
            raise _Fail(key, f"unknown task field (known: {', '.join(sorted(_TASK_FIELDS))})")
    ignored = [key for key in _IGNORED_TASK_FIELDS if task.get(key) is not None]

    task_name = _optional_str(task.get("name"), "name")
    setup = _optional_str(task.get("setup"), "setup")
    run = _optional_str(task.get("run"), "run")
    num_nodes = _num_nodes(task.get("num_nodes"))
    envs = _envs(task.get("envs"), "envs")
    secrets = task.get("secrets")
    if isinstance(secrets, dict):
        envs.update(_envs(secrets, "secrets"))
    elif secrets is not None:
        if not isinstance(secrets, list):
            raise _Fail("secrets", "must be a mapping of name to value or a list of names")
        ignored.append("secrets")  # references to SkyPilot-managed secrets

    resources = _resources(task.get("resources"), ignored)
    pod_config = _pod_config(task, ignored)

    # Labels: pod_config's metadata labels, then the task's, then --priority-class.
    pod_metadata = pod_config.get("metadata") or {}
    if not isinstance(pod_metadata, dict):
        raise _Fail(f"{_pod_config_path(task)}.metadata", "must be a mapping")
    labels = _string_map(pod_metadata.get("labels"), f"{_pod_config_path(task)}.metadata.labels")
    labels.update(resources.labels)
    if resources.accelerator is not None:
        _check_label_value(resources.accelerator, "resources.accelerators")
        labels[ACCELERATOR_LABEL] = resources.accelerator
    if priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    for key, value in labels.items():
        _check_label(key, value, "resources.labels")

    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if resources.cpu_milli is not None:
        requests["cpu"] = format_quantity(resources.cpu_milli)
    if resources.memory_bytes is not None:
        requests["memory"] = format_quantity(resources.memory_bytes * 1000, binary=True)
    if resources.gpus:
        # An extended resource must have its request equal to its limit.
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(resources.gpus)

    env = [{"name": key, "value": value} for key, value in envs.items()]
    env.append({"name": "SKYPILOT_NUM_NODES", "value": str(num_nodes)})
    env.append({"name": "SKYPILOT_NUM_GPUS_PER_NODE", "value": str(resources.gpus)})
    if setup:
        env.append({"name": SETUP_ENV, "value": setup})
    if run:
        env.append({"name": RUN_ENV, "value": run})
    container_resources: dict[str, Any] = {"requests": requests} if requests else {}
    if limits:
        container_resources["limits"] = limits
    container: dict[str, Any] = {
        "name": TASK_CONTAINER,
        "image": resources.image or TASK_IMAGE,
        "command": ["sh", "-c", WRAPPER],
        "env": env,
    }
    if container_resources:
        container["resources"] = container_resources

    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    pod_spec_overrides = pod_config.get("spec")
    if pod_spec_overrides is not None:
        if not isinstance(pod_spec_overrides, dict):
            raise _Fail(f"{_pod_config_path(task)}.spec", "must be a mapping")
        pod_spec = _merge_pod_spec(pod_spec, pod_spec_overrides, f"{_pod_config_path(task)}.spec")
    # What makes this a managed task is not the file's to change.
    pod_spec["restartPolicy"] = "Never"
    task_container = pod_spec["containers"][0]
    task_container["name"] = TASK_CONTAINER
    task_container["command"] = ["sh", "-c", WRAPPER]
    task_container.pop("args", None)

    template_metadata: dict[str, Any] = {"labels": dict(labels)}
    pod_annotations = _string_map(
        pod_metadata.get("annotations"), f"{_pod_config_path(task)}.metadata.annotations"
    )
    if pod_annotations:
        template_metadata["annotations"] = pod_annotations
    job_spec: dict[str, Any] = {
        "parallelism": num_nodes,
        "completions": num_nodes,
        "backoffLimit": 0,
        "template": {"metadata": template_metadata, "spec": pod_spec},
    }
    if num_nodes > 1:
        job_spec["completionMode"] = "Indexed"  # JOB_COMPLETION_INDEX -> SKYPILOT_NODE_RANK
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "labels": dict(labels),
            "annotations": {MAX_RESTARTS_ANNOTATION: str(resources.max_restarts)},
        },
        "spec": job_spec,
    }
    spec = _validate(job, source)
    return ManagedJobSpec(
        name=name or task_name or _stem(source),
        job=job,
        resources=_summary(
            num_nodes,
            _format_number(resources.cpu_milli) if resources.cpu_milli is not None else None,
            (resources.accelerator, str(resources.gpus))
            if resources.accelerator is not None
            else None,
        ),
        max_restarts_on_errors=resources.max_restarts,
        queue_name=spec.queue_name,
        priority_class=spec.priority_class,
        priority_class_name=spec.priority_class_name,
        ignored=tuple(ignored),
    )


@dataclass
class _Resources:
    cpu_milli: int | None = None
    memory_bytes: int | None = None
    accelerator: str | None = None
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 0
    image: str | None = None


def _resources(value: Any, ignored: list[str]) -> _Resources:
    result = _Resources()
    if value is None:
        return result
    if not isinstance(value, dict):
        raise _Fail("resources", f"must be a mapping, got {_show(value)}")
    merged = dict(value)
    for key in ("any_of", "ordered"):
        candidates = merged.pop(key, None)
        if candidates is None:
            continue
        if not isinstance(candidates, list) or not candidates:
            raise _Fail(f"resources.{key}", "must be a non-empty list of resources")
        first = candidates[0]
        if not isinstance(first, dict):
            raise _Fail(f"resources.{key}[0]", "must be a mapping")
        if len(candidates) > 1:
            ignored.append(f"resources.{key}[1:]")  # Berth runs the first candidate
        merged.update(first)
    for key in merged:
        if key not in _RESOURCE_FIELDS or key in ("any_of", "ordered"):
            raise _Fail(f"resources.{key}", "unknown resources field")
    ignored.extend(f"resources.{key}" for key in _IGNORED_RESOURCE_FIELDS if key in merged)

    cloud = merged.get("cloud")
    if cloud is not None and (
        not isinstance(cloud, str) or cloud.lower() not in ("kubernetes", "k8s")
    ):
        raise _Fail("resources.cloud", f"Berth runs tasks on Kubernetes, got {_show(cloud)}")
    infra = merged.get("infra")
    if infra is not None and (
        not isinstance(infra, str) or not re.match(r"^(?i:kubernetes|k8s)(?:/.+)?$", infra)
    ):
        raise _Fail("resources.infra", f"Berth runs tasks on Kubernetes, got {_show(infra)}")

    if merged.get("cpus") is not None:
        result.cpu_milli = _cpus(merged["cpus"])
    if merged.get("memory") is not None:
        result.memory_bytes = _memory(merged["memory"])
    if merged.get("accelerators") is not None:
        result.accelerator, result.gpus, more = _accelerators(merged["accelerators"])
        if more:
            ignored.append("resources.accelerators[1:]")
    result.labels = _string_map(merged.get("labels"), "resources.labels")
    recovery = merged.get("job_recovery")
    if recovery is None:
        recovery = merged.get("spot_recovery")  # the older spelling
    result.max_restarts = _job_recovery(recovery, ignored)
    image = merged.get("image_id")
    if image is not None:
        if not isinstance(image, str) or not image.startswith("docker:") or len(image) == 7:
            raise _Fail("resources.image_id", f"expected 'docker:<image>', got {_show(image)}")
        result.image = image[len("docker:") :]
    return result


def _cpus(value: Any) -> int:
    path = "resources.cpus"
    text = _number_text(value, path, "a number or a string '<number>+'")
    number = _decimal(text, path, value)
    if number <= 0:
        raise _Fail(path, f"must be positive, got {_show(value)}")
    return int((number * 1000).to_integral_value(rounding=ROUND_CEILING))


def _memory(value: Any) -> int:
    path = "resources.memory"
    text = _number_text(
        value, path, "GB as a number, or '<size>[KB|MB|GB|TB|PB]' with optional '+'"
    )
    multiplier = 1 << 30  # a bare number is GB
    lowered = text.lower()
    for unit, size in _MEMORY_UNITS.items():
        if lowered.endswith(unit):
            text, multiplier = text[: -len(unit)], size
            break
    number = _decimal(text, path, value)
    if number <= 0:
        raise _Fail(path, f"must be positive, got {_show(value)}")
    return int((number * multiplier).to_integral_value(rounding=ROUND_CEILING))


def _number_text(value: Any, path: str, expected: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Fail(path, f"invalid value {_show(value)}: expected {expected}")
    text = str(value).strip()
    if text.endswith("+"):  # "at least": Berth requests the number
        text = text[:-1]
    return text


def _decimal(text: str, path: str, original: Any) -> Decimal:
    digits = text.strip()
    if not _NUMBER.match(digits):
        raise _Fail(path, f"invalid value {_show(original)}")
    try:
        return Decimal(digits)
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise _Fail(path, f"invalid value {_show(original)}") from None


def _accelerators(value: Any) -> tuple[str, int, bool]:
    """(model, count, whether further candidates were dropped)."""
    path = "resources.accelerators"
    candidates: list[tuple[str, Any]] = []
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "{[" and text[-1:] in "}]":
            items = [item.strip() for item in text[1:-1].split(",") if item.strip()]
        else:
            items = [text]
        candidates = [_accelerator_item(item, path) for item in items]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise _Fail(f"{path}[{index}]", f"expected '<name>[:<count>]', got {_show(item)}")
            candidates.append(_accelerator_item(item, f"{path}[{index}]"))
    elif isinstance(value, dict):
        candidates = [(str(model), 1 if count is None else count) for model, count in value.items()]
    else:
        raise _Fail(path, f"invalid value {_show(value)}: expected '<name>[:<count>]' or a mapping")
    if not candidates:
        raise _Fail(path, f"invalid value {_show(value)}: names no accelerator")
    model, count = candidates[0]
    if not model:
        raise _Fail(path, f"invalid value {_show(value)}: empty accelerator name")
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise _Fail(f"{path}.{model}", f"invalid count {_show(count)}")
    if count <= 0 or count != int(count):
        raise _Fail(
            path,
            f"invalid count {_show(count)} for {model}:"
            f" {GPU_RESOURCE} takes a positive whole number",
        )
    return model, int(count), len(candidates) > 1


def _accelerator_item(item: str, path: str) -> tuple[str, Any]:
    parts = item.split(":")
    if len(parts) == 1:
        return parts[0].strip(), 1
    if len(parts) != 2:
        raise _Fail(path, f"invalid value {item!r}: expected '<name>' or '<name>:<count>'")
    try:
        count = float(parts[1])
    except ValueError:
        raise _Fail(path, f"invalid value {item!r}: expected '<name>:<count>'") from None
    return parts[0].strip(), int(count) if count.is_integer() else count


def _job_recovery(value: Any, ignored: list[str]) -> int:
    path = "resources.job_recovery"
    if value is None or isinstance(value, str):
        return 0  # a strategy name: Berth's one strategy is to requeue
    if not isinstance(value, dict):
        raise _Fail(path, f"must be a strategy name or a mapping, got {_show(value)}")
    for key in value:
        if key not in ("strategy", "max_restarts_on_errors", "recover_on_exit_codes"):
            raise _Fail(f"{path}.{key}", "unknown job_recovery field")
    strategy = value.get("strategy")
    if strategy is not None and not isinstance(strategy, str):
        raise _Fail(f"{path}.strategy", f"must be a string, got {_show(strategy)}")
    if value.get("recover_on_exit_codes") is not None:
        ignored.append(f"{path}.recover_on_exit_codes")
    restarts = value.get("max_restarts_on_errors", 0)
    if restarts is None:
        return 0
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise _Fail(
            f"{path}.max_restarts_on_errors",
            f"must be a non-negative integer, got {_show(restarts)}",
        )
    return restarts


def _pod_config_path(task: dict[str, Any]) -> str:
    if "config" in task:
        return "config.kubernetes.pod_config"
    return "experimental.config_overrides.kubernetes.pod_config"


def _pod_config(task: dict[str, Any], ignored: list[str]) -> dict[str, Any]:
    """The ``kubernetes.pod_config`` of ``config`` or ``experimental.config_overrides``."""
    overrides: Any = None
    base = ""
    experimental = task.get("experimental")
    if experimental is not None:
        if not isinstance(experimental, dict):
            raise _Fail("experimental", "must be a mapping")
        for key in experimental:
            if key != "config_overrides":
                raise _Fail(f"experimental.{key}", "unknown field (known: config_overrides)")
        overrides, base = experimental.get("config_overrides"), "experimental.config_overrides"
    if task.get("config") is not None:
        if overrides is not None:
            raise _Fail("config", "give either `config` or `experimental.config_overrides`")
        overrides, base = task["config"], "config"
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise _Fail(base, "must be a mapping")
    ignored.extend(f"{base}.{key}" for key in overrides if key != "kubernetes")
    kubernetes = overrides.get("kubernetes")
    if kubernetes is None:
        return {}
    if not isinstance(kubernetes, dict):
        raise _Fail(f"{base}.kubernetes", "must be a mapping")
    ignored.extend(f"{base}.kubernetes.{key}" for key in kubernetes if key != "pod_config")
    pod_config = kubernetes.get("pod_config")
    if pod_config is None:
        return {}
    if not isinstance(pod_config, dict):
        raise _Fail(f"{base}.kubernetes.pod_config", "must be a mapping")
    for key in pod_config:
        if key not in ("metadata", "spec", "apiVersion", "kind"):
            raise _Fail(f"{base}.kubernetes.pod_config.{key}", "unknown pod field")
    return pod_config


def _merge_pod_spec(base: dict[str, Any], override: dict[str, Any], path: str) -> dict[str, Any]:
    """SkyPilot's merge: mappings recursively, ``containers[0]`` into the task container,
    other lists appended, scalars replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if key == "containers":
            if not isinstance(value, list):
                raise _Fail(f"{path}.containers", f"must be a list, got {_show(value)}")
            if not value:
                continue  # nothing to merge; the task container stays
            first = value[0]
            if not isinstance(first, dict):
                raise _Fail(f"{path}.containers[0]", "must be a mapping")
            merged["containers"][0] = _deep_merge(merged["containers"][0], first)
            merged["containers"].extend(copy.deepcopy(value[1:]))
        else:
            merged[key] = _deep_merge(merged.get(key), value)
    return merged


def _deep_merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        result = dict(base)
        for key, value in override.items():
            result[key] = _deep_merge(base.get(key), value)
        return result
    if isinstance(base, list) and isinstance(override, list):
        return [*base, *copy.deepcopy(override)]
    return copy.deepcopy(override)


# --- small parts ----------------------------------------------------------------------------


def _optional_str(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Fail(path, f"must be a string, got {_show(value)}")
    return value


def _num_nodes(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Fail("num_nodes", f"must be a positive integer, got {_show(value)}")
    return value


def _envs(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Fail(path, f"must be a mapping of name to value, got {_show(value)}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise _Fail(f"{path}.{key}", "not a valid environment variable name")
        if key in (SETUP_ENV, RUN_ENV):
            raise _Fail(f"{path}.{key}", "is reserved by Berth")
        if item is None:
            raise _Fail(f"{path}.{key}", "has no value")
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise _Fail(f"{path}.{key}", f"must be a string, got {_show(item)}")
        result[key] = str(item)
    return result


def _string_map(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Fail(path, f"must be a mapping of strings, got {_show(value)}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise _Fail(f"{path}.{key}", f"must be a string, got {_show(item)}")
        result[key] = item
    return result


def _check_label(key: str, value: str, path: str) -> None:
    prefix, _, label_name = key.rpartition("/")
    if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(label_name):
        raise _Fail(f"{path}.{key}", "not a valid Kubernetes label name")
    _check_label_value(value, f"{path}.{key}")


def _check_label_value(value: str, path: str) -> None:
    if not _LABEL_VALUE.match(value):
        raise _Fail(path, f"{value!r} is not a valid Kubernetes label value")


def _stem(source: str) -> str:
    base = PurePath(source).name
    for suffix in (".yaml", ".yml", ".json"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base if base and base not in ("-", "<stdin>") else "task"


def _format_number(milli: int) -> str:
    """Milli-units as a plain number: 4000 -> "4", 500 -> "0.5"."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return format(Decimal(milli) / 1000, "f").rstrip("0").rstrip(".")


def _summary(count: int, cpus: str | None, accelerator: tuple[str, str] | None) -> str:
    parts = []
    if cpus is not None:
        parts.append(f"CPU:{cpus}")
    if accelerator is not None:
        parts.append(f"{accelerator[0]}:{accelerator[1]}")
    return f"{count}x[{', '.join(parts) or '-'}]"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
