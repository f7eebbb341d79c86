"""Small checks shared by the task parser's modules: each raises :class:`Fail` with the path
of the field at fault; :func:`berth_cli.tasks.load_managed_job` turns it into one line."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import PurePath
from typing import Any

__all__ = [
    "ENV_NAME",
    "Fail",
    "TaskError",
    "check_label",
    "check_label_value",
    "envs",
    "format_number",
    "num_nodes",
    "optional_str",
    "show",
    "stem",
    "string_map",
]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$")
RESERVED_ENVS = ("BERTH_TASK_SETUP", "BERTH_TASK_RUN")


class TaskError(ValueError):
    """A file that cannot become a managed job; one line naming the field."""


class Fail(Exception):
    """A field path and a message, turned into a TaskError with the source."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def optional_str(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Fail(path, f"must be a string, got {show(value)}")
    return value


def num_nodes(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Fail("num_nodes", f"must be a positive integer, got {show(value)}")
    return value


def envs(value: Any, path: str, *, flag: str = "--env") -> dict[str, str | None]:
    """A mapping of variable names to values; a None value is one the CLI must give (with
    ``flag``), checked by the caller once the flags are in."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Fail(path, f"must be a mapping of name to value, got {show(value)}")
    result: dict[str, str | None] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise Fail(f"{path}.{key}", "not a valid environment variable name")
        if key in RESERVED_ENVS:
            raise Fail(f"{path}.{key}", "is reserved by Berth")
        if item is not None and (isinstance(item, bool) or not isinstance(item, str | int | float)):
            shown = "" if flag == "--secret" else f", got {show(item)}"  # never a secret
            raise Fail(f"{path}.{key}", f"must be a string{shown}")
        result[key] = None if item is None else str(item)
    return result


def string_map(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Fail(path, f"must be a mapping of strings, got {show(value)}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise Fail(f"{path}.{key}", f"must be a string, got {show(item)}")
        result[key] = item
    return result


def check_label(key: str, value: str, path: str) -> None:
    prefix, _, label_name = key.rpartition("/")
    if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(label_name):
        raise Fail(f"{path}.{key}", "not a valid Kubernetes label name")
    check_label_value(value, f"{path}.{key}")


def check_label_value(value: str, path: str) -> None:
    if not _LABEL_VALUE.match(value):
        raise Fail(path, f"{value!r} is not a valid Kubernetes label value")


def stem(source: str) -> str:
    """A file's name without its YAML suffix (a task's default name)."""
    base = PurePath(source).name
    for suffix in (".yaml", ".yml", ".json"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base if base and base not in ("-", "<stdin>") else "task"


def format_number(milli: int) -> str:
    """Milli-units as a plain number: 4000 -> "4", 500 -> "0.5"."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return format(Decimal(milli) / 1000, "f").rstrip("0").rstrip(".")
