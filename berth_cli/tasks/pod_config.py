"""A task's ``kubernetes.pod_config``, as SkyPilot applies it to the pod it makes.

It comes from ``experimental.config_overrides`` (older SkyPilot) or ``config`` (newer); only
``kubernetes.pod_config`` acts on a Berth job (the other keys are listed as ignored), and it is
merged into the pod template as SkyPilot merges it: mappings recursively, ``containers[0]``
into the task's container, other lists appended, scalars replaced.
"""

from __future__ import annotations

import copy
from typing import Any

from berth_cli.tasks.fields import Fail, show

__all__ = ["merge_pod_spec", "pod_config", "pod_config_path"]


def pod_config_path(task: dict[str, Any]) -> str:
    if "config" in task:
        return "config.kubernetes.pod_config"
    return "experimental.config_overrides.kubernetes.pod_config"


def pod_config(task: dict[str, Any], ignored: list[str]) -> dict[str, Any]:
    """The ``kubernetes.pod_config`` of ``config`` or ``experimental.config_overrides``."""
    overrides: Any = None
    base = ""
    experimental = task.get("experimental")
    if experimental is not None:
        if not isinstance(experimental, dict):
            raise Fail("experimental", "must be a mapping")
        for key in experimental:
            if key != "config_overrides":
                raise Fail(f"experimental.{key}", "unknown field (known: config_overrides)")
        overrides, base = experimental.get("config_overrides"), "experimental.config_overrides"
    if task.get("config") is not None:
        if overrides is not None:
            raise Fail("config", "give either `config` or `experimental.config_overrides`")
        overrides, base = task["config"], "config"
    if overrides is None:
        return {}
    # down overrides -> kubernetes -> pod_config: each a mapping whose other keys are ignored
    pod_config, path = overrides, base
    for wanted in ("kubernetes", "pod_config"):
        if not isinstance(pod_config, dict):
            raise Fail(path, "must be a mapping")
        ignored.extend(f"{path}.{key}" for key in pod_config if key != wanted)
        pod_config, path = pod_config.get(wanted), f"{path}.{wanted}"
        if pod_config is None:
            return {}
    if not isinstance(pod_config, dict):
        raise Fail(path, "must be a mapping")
    for key in pod_config:
        if key not in ("metadata", "spec", "apiVersion", "kind"):
            raise Fail(f"{path}.{key}", "unknown pod field")
    return pod_config


def merge_pod_spec(base: dict[str, Any], override: dict[str, Any], path: str) -> dict[str, Any]:
    """SkyPilot's merge: mappings recursively, ``containers[0]`` into the task container,
    other lists appended, scalars replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if key == "containers":
            if not isinstance(value, list):
                raise Fail(f"{path}.containers", f"must be a list, got {show(value)}")
            if not value:
                continue  # nothing to merge; the task container stays
            first = value[0]
            if not isinstance(first, dict):
                raise Fail(f"{path}.containers[0]", "must be a mapping")
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
