"""`berth jobs launch`: a task file, the command line's envs and secrets, the ClusterQueue's
flavors, and the request to recovery.

- ``--env KEY=VALUE`` / ``--env KEY`` (from this shell's environment), ``--env-file`` (dotenv
  lines ``KEY=VALUE``, ``#`` comments, an optional ``export``): the task's ``envs`` overridden
  by the file, then by the flags, as SkyPilot merges them; every task of a pipeline gets them.
- ``--secret KEY=VALUE`` / ``--secret KEY``: stored in the ``berth-secrets`` bucket under a
  name made for this launch, never in the job's record, never printed (:mod:`shared.secrets`).
- Candidates (accelerator sets and lists, ``any_of``, ``ordered``) are chosen by what the
  task's ClusterQueue can satisfy (:mod:`berth_cli.tasks.choosing`), read from the
  configuration `berth apply` stored: the LocalQueue, its ClusterQueue, their flavors.
- Each field accepted and not acted on is one warning line on stderr.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec

from berth_cli.client import CliError
from berth_cli.tasks import Flavor, ManagedJobSpec, TaskError, load_managed_job, queues_named
from berth_cli.tasks.fields import ENV_NAME
from shared.bus import KeyNotFound
from shared.config import (
    ClusterQueue,
    ConfigError,
    LocalQueue,
    ResourceFlavor,
    config_key,
    decode_object,
)
from shared.quantities import QuantityError, parse_quantity
from shared.secrets import SECRETS_BUCKET

__all__ = [
    "assignments",
    "env_file",
    "launch_request",
    "parse_task",
    "queue_flavors",
    "store_secrets",
]


def assignments(values: tuple[str, ...], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` or ``KEY`` (from the environment) for each use of ``flag``."""
    result: dict[str, str] = {}
    for value in values:
        key, has_value, given = value.partition("=")
        if not ENV_NAME.match(key):
            raise CliError(f"{flag} {key!r}: not a valid environment variable name")
        if not has_value:
            if key not in os.environ:
                raise CliError(f"{flag} {key}: not set in this environment (give {key}=VALUE)")
            given = os.environ[key]
        result[key] = given
    return result


def env_file(path: str) -> dict[str, str]:
    """A dotenv file's variables; one line naming the file and line for a bad one."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise CliError(f"--env-file {path}: {error.strerror or error}") from None
    result: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        text = text.removeprefix("export ").strip()
        key, has_value, value = text.partition("=")
        key = key.strip()
        if not has_value or not ENV_NAME.match(key):
            raise CliError(f"--env-file {path}: line {number}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
    return result


def parse_task(
    text: str,
    source: str,
    *,
    name: str | None,
    priority_class: str | None,
    env: dict[str, str],
    secrets: dict[str, str],
    secret_name: str,
    flavors: dict[str, list[Flavor]] | None,
    validate: str = "strict",
) -> ManagedJobSpec:
    try:
        return load_managed_job(
            text,
            source=source,
            name=name,
            priority_class=priority_class,
            env=env,
            secrets=secrets,
            secret_name=secret_name,
            flavors=flavors,
            validate=validate,
        )
    except TaskError as error:
        raise CliError(str(error)) from error


async def queue_flavors(kv: Any, namespace: str, text: str, source: str) -> dict[str, list[Flavor]]:
    """The flavors of the ClusterQueue behind each LocalQueue the file names (none for a
    queue that is not there: the launch is then refused or fails its prechecks as before)."""
    found: dict[str, list[Flavor]] = {}
    for queue in queues_named(text, source=source):
        local = await _config(kv, config_key("LocalQueue", queue or "default", namespace))
        if not isinstance(local, LocalQueue):
            continue
        cluster = await _config(kv, config_key("ClusterQueue", local.spec.cluster_queue))
        if not isinstance(cluster, ClusterQueue):
            continue
        flavors = []
        for group in cluster.spec.resource_groups:
            for quota in group.flavors:
                flavor = await _config(kv, config_key("ResourceFlavor", quota.name))
                labels = flavor.spec.node_labels if isinstance(flavor, ResourceFlavor) else {}
                flavors.append(Flavor(quota.name, dict(labels), _quotas(quota.resources)))
        found[queue] = flavors
    return found


def _quotas(resources: list[Any]) -> dict[str, int]:
    quotas: dict[str, int] = {}
    for resource in resources:
        try:
            amount = parse_quantity(resource.nominal_quota)
            if resource.borrowing_limit is not None:
                amount += parse_quantity(resource.borrowing_limit)
        except QuantityError:
            continue  # `berth apply` checked it; nothing to compare with otherwise
        quotas[resource.name] = amount
    return quotas


async def _config(kv: Any, key: str) -> Any:
    try:
        entry = await kv.get(key)
    except KeyNotFound:
        return None
    try:
        return decode_object(entry.value) if entry.value else None
    except (ConfigError, msgspec.DecodeError):
        return None  # a record that does not decode: as if absent (the services say so)


async def store_secrets(bus: Any, name: str, values: dict[str, str]) -> None:
    """Put one launch's secrets in the secrets bucket (the watcher reads them there)."""
    kv = await bus.kv(SECRETS_BUCKET)
    await kv.put(name, json.dumps(values, sort_keys=True).encode())


def launch_request(spec: ManagedJobSpec, namespace: str) -> dict[str, Any]:
    """What recovery's launch API takes: the first task's fields, and every task of a
    pipeline in order."""
    request: dict[str, Any] = {
        "name": spec.name,
        "namespace": namespace,
        "template": spec.job,
        "resources": spec.resources,
        "queueName": spec.queue_name,
        "maxRestartsOnErrors": spec.max_restarts_on_errors,
        "recoverOnExitCodes": list(spec.tasks[0].recover_on_exit_codes),
    }
    if len(spec.tasks) > 1:
        request["tasks"] = [
            {
                "name": task.name,
                "template": task.job,
                "resources": task.resources,
                "maxRestartsOnErrors": task.max_restarts_on_errors,
                "recoverOnExitCodes": list(task.recover_on_exit_codes),
            }
            for task in spec.tasks
        ]
    return request
