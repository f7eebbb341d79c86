"""From one SkyPilot task (or a batch/v1 Job) to the batch/v1 Job Berth runs.

A task becomes a Job with one container named ``task`` whose command is a small ``sh``
wrapper: it runs ``setup`` (exiting :data:`SETUP_FAILED_EXIT_CODE` if that fails), then
``exec``s ``run``, whose exit code is the job's. Both scripts travel in environment variables
(``BERTH_TASK_SETUP``, ``BERTH_TASK_RUN``), never interpolated into the command, so no quoting
in them can break it. Each runs under ``bash`` when the image has it (SkyPilot's shell), else
``sh``. ``num_nodes`` is the Job's parallelism (indexed: ``SKYPILOT_NODE_RANK``); envs are the
container's environment, secrets references to the launch's secret (:mod:`shared.secrets`);
``workdir`` and local ``file_mounts`` are annotations the local backend copies from.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from berth_cli.tasks.choosing import Flavor, choose
from berth_cli.tasks.fields import (
    Fail,
    TaskError,
    check_label,
    check_label_value,
    envs,
    format_number,
    num_nodes,
    optional_str,
    show,
    string_map,
)
from berth_cli.tasks.pod_config import merge_pod_spec, pod_config, pod_config_path
from berth_cli.tasks.resources import Candidate, parse_resources
from berth_cli.workload_schema import validate_fields
from shared.quantities import format_quantity
from shared.tasks import (
    ACCELERATOR_LABEL,
    FILE_MOUNTS_ANNOTATION,
    MAX_RESTARTS_ANNOTATION,
    RECOVER_ON_EXIT_CODES_ANNOTATION,
    SETUP_FAILED_EXIT_CODE,
    TASK_CONTAINER,
    TASK_IMAGE,
    WORKDIR_ANNOTATION,
)
from shared.workloads import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, WorkloadError, workload_spec

__all__ = ["WRAPPER", "Overrides", "TaskSpec", "from_job", "from_task", "queue_of"]

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
    "name", "workdir", "event_callback", "num_nodes", "resources", "file_mounts", "setup",
    "run", "envs", "secrets", "inputs", "outputs", "volumes", "config", "experimental",
    "service",
}  # fmt: skip
# Accepted, with no effect on a Berth job (a `service:` makes it a SkyServe service).
_IGNORED_TASK_FIELDS = ("event_callback", "inputs", "outputs", "volumes", "service")
# Set by the caller (recovery), not by the file.
_SERVER_METADATA = (
    "name", "generateName", "namespace", "uid", "resourceVersion", "creationTimestamp",
    "generation", "managedFields", "ownerReferences",
)  # fmt: skip


@dataclass(frozen=True)
class TaskSpec:
    """One task of a managed job: its Job and what ``berth jobs queue`` shows of it."""

    name: str
    job: dict[str, Any]  # batch/v1 Job without metadata.name/namespace/uid
    resources: str  # "1x[CPU:4]", "1x[T4:4]", "2x[CPU:6, L4:1]"
    max_restarts_on_errors: int
    recover_on_exit_codes: tuple[int, ...]
    queue_name: str  # "" = the namespace's default LocalQueue
    priority_class: str  # kueue.x-k8s.io/priority-class label
    priority_class_name: str  # pod spec.priorityClassName


@dataclass(frozen=True)
class Overrides:
    """What the command line adds to every task: ``--env``/``--env-file`` values,
    ``--secret`` values, the launch's secret name, the directory relative paths start from,
    and the ClusterQueues' flavors by queue name (None: not known)."""

    env: dict[str, str]
    secrets: dict[str, str]
    secret_name: str
    base_dir: Path
    priority_class: str | None = None
    flavors: dict[str, list[Flavor]] | None = None


def queue_of(task: dict[str, Any]) -> str:
    """The LocalQueue a task names (``""``: the namespace's default), before any choice."""
    try:
        config = pod_config(task, [])
        labels = string_map((config.get("metadata") or {}).get("labels"), "labels")
        resources = task.get("resources") if isinstance(task.get("resources"), dict) else {}
        assert isinstance(resources, dict)
        labels.update(string_map(resources.get("labels"), "resources.labels"))
    except Fail:
        return ""
    return labels.get(QUEUE_NAME_LABEL, "")


def _validate(job: dict[str, Any], source: str, *, validate: str) -> Any:
    """The Job's spec, its unknown fields met as ``validate`` says (kubectl's ``--validate``:
    a Job as the user gave it; ``ignore`` for one Berth built), first: a typo is named, not
    what it hid. Either refusal is a :class:`TaskError` naming ``source``."""
    try:
        validate_fields(job, validate, source)
        return workload_spec(job)
    except WorkloadError as error:
        raise TaskError(f"{source}: {error}") from None


def _summary(count: int, cpus: str | None, accelerator: tuple[str, str] | None) -> str:
    parts = []
    if cpus is not None:
        parts.append(f"CPU:{cpus}")
    if accelerator is not None:
        parts.append(f"{accelerator[0]}:{accelerator[1]}")
    return f"{count}x[{', '.join(parts) or '-'}]"


def from_job(
    document: dict[str, Any],
    source: str,
    name: str,
    priority_class: str | None,
    validate: str = "strict",
) -> TaskSpec:
    """A batch/v1 Job as given; the max-restarts and recover-codes annotations read."""
    if document.get("kind") != "Job":
        raise Fail(
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
        raise Fail("metadata", "must be a mapping")
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    labels = string_map(metadata.get("labels"), "metadata.labels")
    if priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    if labels:
        metadata["labels"] = labels
    annotations = string_map(metadata.get("annotations"), "metadata.annotations")
    max_restarts = 0
    if MAX_RESTARTS_ANNOTATION in annotations:
        raw = annotations[MAX_RESTARTS_ANNOTATION]
        if not raw.isdigit():
            raise Fail(
                f"metadata.annotations.{MAX_RESTARTS_ANNOTATION}",
                f"must be a non-negative integer, got {raw!r}",
            )
        max_restarts = int(raw)
    codes = annotations.get(RECOVER_ON_EXIT_CODES_ANNOTATION, "")
    parts = [part.strip() for part in codes.split(",") if part.strip()]
    if not all(part.isdigit() and int(part) <= 255 for part in parts):
        raise Fail(
            f"metadata.annotations.{RECOVER_ON_EXIT_CODES_ANNOTATION}",
            f"must list exit codes 0 to 255, got {codes!r}",
        )
    spec = _validate(job, source, validate=validate)
    pod_set = spec.pod_sets[0]
    template_labels = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    model = labels.get(ACCELERATOR_LABEL) or (template_labels.get("labels") or {}).get(
        ACCELERATOR_LABEL
    )
    cpu = pod_set.requests.get("cpu", 0)
    gpus = sum(
        pod_set.requests.get(r, 0) for r in ("nvidia.com/gpu", "amd.com/gpu", "google.com/tpu")
    )
    return TaskSpec(
        name=name,
        job=job,
        resources=_summary(
            pod_set.count,
            format_number(cpu) if cpu else None,
            (str(model or "GPU"), format_number(gpus)) if gpus else None,
        ),
        max_restarts_on_errors=max_restarts,
        recover_on_exit_codes=tuple(int(part) for part in parts),
        queue_name=spec.queue_name,
        priority_class=spec.priority_class,
        priority_class_name=spec.priority_class_name,
    )


def from_task(
    task: dict[str, Any], source: str, name: str, overrides: Overrides, ignored: list[str]
) -> tuple[TaskSpec, dict[str, str]]:
    """A SkyPilot task as a Job; also the secret values it needs stored (by variable)."""
    if "pool" in task:
        raise Fail("pool", "SkyPilot worker pools (sky jobs pool) are not supported")
    for key in task:
        if key not in _TASK_FIELDS:
            raise Fail(key, f"unknown task field (known: {', '.join(sorted(_TASK_FIELDS))})")
    ignored.extend(key for key in _IGNORED_TASK_FIELDS if task.get(key) is not None)
    setup = optional_str(task.get("setup"), "setup")
    run = optional_str(task.get("run"), "run")
    nodes = num_nodes(task.get("num_nodes"))
    variables = _variables(task, overrides)
    secret_values = _secrets(task, overrides, ignored)
    candidates = parse_resources(task.get("resources"), ignored)
    flavors = None if overrides.flavors is None else overrides.flavors.get(queue_of(task))
    resources = choose(candidates, nodes, flavors)
    config = pod_config(task, ignored)
    annotations = _files(task, overrides.base_dir, ignored)

    # Labels: pod_config's metadata labels, then the task's, then --priority-class.
    pod_metadata = config.get("metadata") or {}
    if not isinstance(pod_metadata, dict):
        raise Fail(f"{pod_config_path(task)}.metadata", "must be a mapping")
    labels = string_map(pod_metadata.get("labels"), f"{pod_config_path(task)}.metadata.labels")
    labels.update(resources.labels)
    if resources.accelerator is not None:
        check_label_value(resources.accelerator, "resources.accelerators")
        labels[ACCELERATOR_LABEL] = resources.accelerator
    if overrides.priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = overrides.priority_class
    for key, value in labels.items():
        check_label(key, value, "resources.labels")

    env: list[dict[str, Any]] = [
        {"name": key, "value": value}
        for key, value in variables.items()
        if key not in secret_values
    ]
    env += [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": overrides.secret_name, "key": key}}}
        for key in secret_values
    ]
    env.append({"name": "SKYPILOT_NUM_NODES", "value": str(nodes)})
    env.append({"name": "SKYPILOT_NUM_GPUS_PER_NODE", "value": str(resources.count)})
    if setup:
        env.append({"name": SETUP_ENV, "value": setup})
    if run:
        env.append({"name": RUN_ENV, "value": run})
    pod_spec = _pod_spec(task, config, resources, env)
    template_metadata: dict[str, Any] = {"labels": dict(labels)}
    pod_annotations = string_map(
        pod_metadata.get("annotations"), f"{pod_config_path(task)}.metadata.annotations"
    )
    if pod_annotations:
        template_metadata["annotations"] = pod_annotations
    job_spec: dict[str, Any] = {
        "parallelism": nodes,
        "completions": nodes,
        "backoffLimit": 0,
        "template": {"metadata": template_metadata, "spec": pod_spec},
    }
    if nodes > 1:
        job_spec["completionMode"] = "Indexed"  # JOB_COMPLETION_INDEX -> SKYPILOT_NODE_RANK
    annotations[MAX_RESTARTS_ANNOTATION] = str(resources.max_restarts)
    if resources.recover_on_exit_codes:
        codes = ",".join(str(code) for code in resources.recover_on_exit_codes)
        annotations[RECOVER_ON_EXIT_CODES_ANNOTATION] = codes
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"labels": dict(labels), "annotations": annotations},
        "spec": job_spec,
    }
    spec = _validate(job, source, validate="ignore")  # a Job Berth built
    accelerator = (resources.accelerator, str(resources.count)) if resources.accelerator else None
    cpus = format_number(resources.cpu_milli) if resources.cpu_milli is not None else None
    task_spec = TaskSpec(
        name=name,
        job=job,
        resources=_summary(nodes, cpus, accelerator),
        max_restarts_on_errors=resources.max_restarts,
        recover_on_exit_codes=resources.recover_on_exit_codes,
        queue_name=spec.queue_name,
        priority_class=spec.priority_class,
        priority_class_name=spec.priority_class_name,
    )
    return task_spec, secret_values


def _pod_spec(
    task: dict[str, Any], config: dict[str, Any], resources: Candidate, env: list[dict[str, Any]]
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if resources.cpu_milli is not None:
        requests["cpu"] = format_quantity(resources.cpu_milli)
    if resources.memory_bytes is not None:
        requests["memory"] = format_quantity(resources.memory_bytes * 1000, binary=True)
    if resources.count:
        # An extended resource must have its request equal to its limit.
        requests[resources.device] = limits[resources.device] = str(resources.count)
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
    overrides = config.get("spec")
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise Fail(f"{pod_config_path(task)}.spec", "must be a mapping")
        pod_spec = merge_pod_spec(pod_spec, overrides, f"{pod_config_path(task)}.spec")
    # What makes this a managed task is not the file's to change.
    pod_spec["restartPolicy"] = "Never"
    task_container = pod_spec["containers"][0]
    task_container["name"] = TASK_CONTAINER
    task_container["command"] = ["sh", "-c", WRAPPER]
    task_container.pop("args", None)
    return pod_spec


def _variables(task: dict[str, Any], overrides: Overrides) -> dict[str, str]:
    """The task's envs, then ``--env-file`` and ``--env`` (the command line wins); a variable
    the task leaves empty (``null``) must be given there."""
    merged = {**envs(task.get("envs"), "envs"), **overrides.env}
    for key, value in merged.items():
        if value is None:
            raise Fail(f"envs.{key}", f"has no value: give it with --env {key}=VALUE")
    return {key: str(value) for key, value in merged.items()}


def _secrets(task: dict[str, Any], overrides: Overrides, ignored: list[str]) -> dict[str, str]:
    """The task's ``secrets`` (a mapping), then ``--secret`` (which wins); a secret left
    ``null`` must be given on the command line. A list names SkyPilot-managed secrets,
    which Berth has not: ignored."""
    given = task.get("secrets")
    if isinstance(given, list):
        ignored.append("secrets")
        given = None
    merged = {**envs(given, "secrets", flag="--secret"), **overrides.secrets}
    for key, value in merged.items():
        if value is None:
            raise Fail(f"secrets.{key}", f"has no value: give it with --secret {key}[=VALUE]")
    return {key: str(value) for key, value in merged.items()}


def _files(task: dict[str, Any], base: Path, ignored: list[str]) -> dict[str, str]:
    """The workdir and the local file mounts, as annotations (absolute local paths, checked
    to exist); a git workdir, a bucket or a cloud URI is not copied: ignored."""
    annotations: dict[str, str] = {}
    workdir = task.get("workdir")
    if isinstance(workdir, dict):
        ignored.append("workdir")  # a git repository to clone
    elif workdir is not None:
        path = _local(workdir, "workdir", base)
        if not path.is_dir():
            raise Fail("workdir", f"{show(workdir)} is not a directory ({path})")
        annotations[WORKDIR_ANNOTATION] = str(path)
    mounts = task.get("file_mounts")
    if mounts is None:
        return annotations
    if not isinstance(mounts, dict):
        raise Fail("file_mounts", f"must be a mapping of target to source, got {show(mounts)}")
    local: dict[str, str] = {}
    for target, source in mounts.items():
        where = f"file_mounts.{target}"
        if not isinstance(target, str) or not target:
            raise Fail("file_mounts", f"a target must be a path, got {show(target)}")
        if isinstance(source, dict) or (isinstance(source, str) and "://" in source):
            ignored.append(where)  # a bucket or a cloud URI
            continue
        path = _local(source, where, base)
        if not path.exists():
            raise Fail(where, f"{show(source)} does not exist ({path})")
        local[target] = str(path)
    if local:
        annotations[FILE_MOUNTS_ANNOTATION] = json.dumps(local, sort_keys=True)
    return annotations


def _local(value: Any, path: str, base: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise Fail(path, f"must be a local path, got {show(value)}")
    return (base / os.path.expanduser(value)).resolve()
