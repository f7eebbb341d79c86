"""What a managed task's processes get before they start on the local backend: their
secrets, and their working directory with the task's workdir and file mounts in it.

- Secrets: a container's ``env`` entry ``valueFrom.secretKeyRef`` (``berth jobs launch
  --secret``, :mod:`shared.secrets`) is read from the ``berth-secrets`` bucket and set in the
  processes' environment; a secret that is not there fails the run, naming the secret and
  the variable, never a value.
- Files: a Job annotated with ``berth.dev/workdir`` and ``berth.dev/file-mounts`` runs in
  ``DATA_DIR/runs/<namespace>/<name>/<generation>`` (owner-only), into which the workdir's
  contents are copied, and each local file mount to its target *inside* that directory
  (``~/data`` and ``/data`` both become ``./data``: a process on this machine cannot be given
  the pod's filesystem). SkyPilot runs ``run`` in the workdir; so does Berth. A container's
  own ``workingDir`` wins.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from shared.bus import Bus, KeyNotFound
from shared.logging import get_logger
from shared.secrets import SECRET_PREFIX, SECRETS_BUCKET, decode_secret, secret_refs
from shared.tasks import FILE_MOUNTS_ANNOTATION, WORKDIR_ANNOTATION

__all__ = ["RunSetupError", "prepare_run"]

log = get_logger("watcher.local")

LocalPod = tuple[str, list[str], dict[str, str], str | None]  # name, argv, env, working dir


class RunSetupError(Exception):
    """The run cannot start; the message says why (and holds no secret value)."""


async def prepare_run(
    bus: Bus,
    obj: dict[str, Any],
    pod_specs: dict[str, dict[str, Any]],
    pods: list[LocalPod],
    *,
    run_dir: Path,
) -> list[LocalPod]:
    """The pods with their secrets in their environment and, if the task has files, their
    working directory staged (see the module docstring)."""
    secrets = await _secrets(bus, pod_specs)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    staged: Path | None = None
    if annotations.get(WORKDIR_ANNOTATION) or annotations.get(FILE_MOUNTS_ANNOTATION):
        staged = await asyncio.to_thread(_stage, annotations, run_dir)
    return [(name, argv, {**env, **secrets}, cwd or _text(staged)) for name, argv, env, cwd in pods]


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


async def _secrets(bus: Bus, pod_specs: dict[str, dict[str, Any]]) -> dict[str, str]:
    refs = [
        ref
        for pod_spec in pod_specs.values()
        for container in (pod_spec.get("containers") or [])[:1]
        if isinstance(container, dict)
        for ref in secret_refs(container.get("env"))
        if ref[1].startswith(SECRET_PREFIX)  # Berth's own; a cluster's Secrets are not here
    ]
    if not refs:
        return {}
    kv = await bus.kv(SECRETS_BUCKET)
    stored: dict[str, dict[str, str]] = {}
    values: dict[str, str] = {}
    for variable, name, key in refs:
        if name not in stored:
            try:
                stored[name] = decode_secret((await kv.get(name)).value)
            except KeyNotFound:
                stored[name] = {}
        if key not in stored[name]:
            raise RunSetupError(f"secret {name} has no key {key} (for {variable})")
        values[variable] = stored[name][key]
    return values


def _stage(annotations: dict[str, str], run_dir: Path) -> Path:
    """Copy the workdir and the file mounts into a fresh, owner-only run directory."""
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    workdir = annotations.get(WORKDIR_ANNOTATION)
    try:
        if workdir:
            shutil.copytree(workdir, run_dir, symlinks=True, dirs_exist_ok=True)
        for target, source in json.loads(annotations.get(FILE_MOUNTS_ANNOTATION) or "{}").items():
            destination = run_dir / _inside(str(target))
            destination.parent.mkdir(parents=True, exist_ok=True)
            if Path(source).is_dir():
                shutil.copytree(source, destination, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(source, destination)
        os.chmod(run_dir, 0o700)  # copying the workdir copied its mode too
    except (OSError, ValueError, shutil.Error) as error:
        raise RunSetupError(f"cannot copy the task's files into {run_dir}: {error}") from error
    return run_dir


def _inside(target: str) -> Path:
    """A mount target as a path under the run directory; never one that leaves it."""
    text = target.removeprefix("~").lstrip("/")
    parts = PurePosixPath(text).parts
    if not parts or ".." in parts:
        raise ValueError(f"file mount target {target!r} is not a path Berth can place")
    return Path(*parts)
