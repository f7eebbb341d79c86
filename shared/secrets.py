"""A managed job's secrets: kept out of every record but one bucket, and out of every log.

``berth jobs launch --secret KEY=VALUE`` (and a task's ``secrets:``) stores the values in the
``berth-secrets`` key-value bucket, under a name made for that launch
(``berth-secret-<random>``), as one JSON mapping. The Job the task becomes refers to them the
way Kubernetes does, ``env: [{name: KEY, valueFrom: {secretKeyRef: {name, key}}}]``, so the
job record recovery keeps, the event stream and the watcher's objects hold only the name.
Only the CLI writes the bucket and only the watcher reads it: the local backend resolves the
references when it starts the processes; the Kubernetes backend creates a Secret of that
name in the namespace before the Job. No log line carries a value.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

__all__ = ["SECRETS_BUCKET", "SECRET_PREFIX", "decode_secret", "new_secret_name", "secret_refs"]

SECRETS_BUCKET = "berth-secrets"
SECRET_PREFIX = "berth-secret-"


def new_secret_name() -> str:
    """A fresh, unguessable name for one launch's secrets (a DNS label, a bucket key)."""
    return SECRET_PREFIX + secrets.token_hex(8)


def decode_secret(data: bytes | None) -> dict[str, str]:
    """A stored secret's values (empty if absent or malformed)."""
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def secret_refs(env: Any) -> list[tuple[str, str, str]]:
    """(variable, secret name, key) for each ``valueFrom.secretKeyRef`` of a container's env."""
    found = []
    for item in env if isinstance(env, list) else []:
        ref = (
            ((item or {}).get("valueFrom") or {}).get("secretKeyRef")
            if isinstance(item, Mapping)
            else None
        )
        if isinstance(ref, Mapping) and ref.get("name") and ref.get("key"):
            found.append((str(item.get("name")), str(ref["name"]), str(ref["key"])))
    return found
