"""Reading a workload object's fields: each helper checks one field's shape and, when it is
wrong, raises :class:`WorkloadError` with a one-line message naming the field's path.

Shared by :mod:`shared.workloads` (the generic part: identity, labels, requests) and
:mod:`shared.workload_kinds` (one function per kind: where its pod templates are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "INT32_MAX",
    "Path",
    "PodTemplate",
    "WorkloadError",
    "int_field",
    "list_field",
    "mapping",
    "path_text",
    "pod_spec_at",
    "show",
    "strings",
]

INT32_MAX = 2**31 - 1
Path = tuple[str | int, ...]  # keys and list indexes from an object's root


@dataclass(frozen=True)
class PodTemplate:
    """One pod set of an object: ``count`` pods shaped by ``spec``, found at ``path``."""

    name: str
    count: int
    spec: dict[str, Any]
    path: Path
    min_count: int | None = None


class WorkloadError(ValueError):
    """An object that cannot become a workload; the message names the field."""


def path_text(path: Path) -> str:
    """A path as error messages spell it: ``spec.replicatedJobs[0].template``."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else f".{step}" if text else step
    return text


def show(value: Any) -> str:
    """A value for an error message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def mapping(value: Any, path: str) -> dict[str, Any]:
    """A mapping field (absent: empty); anything else is refused naming the field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WorkloadError(f"`{path}` must be a mapping, got {show(value)}")
    return value


def list_field(value: Any, path: str) -> list[Any]:
    """A list field (absent: empty); anything else is refused naming the field."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WorkloadError(f"`{path}` must be a list, got {show(value)}")
    return value


def strings(value: Any, path: str) -> dict[str, str]:
    """A mapping of strings to strings (labels, annotations)."""
    result: dict[str, str] = {}
    for key, item in mapping(value, path).items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise WorkloadError(f"`{path}.{key}` must be a string, got {show(item)}")
        result[key] = item
    return result


def int_field(value: Any, path: str, default: int) -> int:
    """A non-negative 32-bit integer (absent: ``default``)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
        raise WorkloadError(f"`{path}` must be a non-negative integer, got {show(value)}")
    return value


def pod_spec_at(parent: Any, path: str) -> dict[str, Any]:
    """``<parent>.template.spec``, which must be a mapping."""
    template = mapping(parent, path).get("template")
    spec = mapping(template, f"{path}.template").get("spec")
    if not isinstance(spec, dict):
        raise WorkloadError(f"`{path}.template.spec` is missing" if path else "`template.spec`")
    return spec
