"""What the local backend accepts from its buckets: a workload object or a status record,
or the reason it is malformed (then it is dead-lettered and skipped, never retried); and which
object a decision names."""

from __future__ import annotations

from typing import Any

import msgspec

from services.watcher.local.spec_memo import SpecMemo
from shared.durations import parse_duration
from shared.events import WorkloadRef
from shared.workloads import (
    SIMULATED_RUNTIME_ANNOTATION,
    WorkloadError,
    WorkloadSpec,
    check_identity,
    workload_key,
    workload_spec,
)

__all__ = [
    "SECONDS_MEMO_SIZE",
    "find_object",
    "read_object",
    "read_status",
    "read_workload",
    "simulated_seconds",
]

SECONDS_MEMO_SIZE = 256  # runtimes remembered at most (all forgotten when it is full)
_seconds: dict[str, float] = {}  # runtime text -> seconds (simulated_seconds)


def read_object(key: str, value: bytes) -> dict[str, Any] | str:
    """The workload stored under ``key``, or why it cannot be one (:func:`read_workload`)."""
    read = read_workload(key, value)
    return read if isinstance(read, str) else read[0]


def read_workload(
    key: str, value: bytes, specs: SpecMemo | None = None
) -> tuple[dict[str, Any], WorkloadSpec] | str:
    """The workload stored under ``key`` and its spec, or why it cannot be one.

    The rule: the value is a JSON Job, Pod or RayJob that :func:`workload_spec` accepts,
    whose name, namespace, uid and creation time pass :func:`check_identity`, stored under
    the key its namespace and name make (so a decision about it finds it, and nothing
    derived from its name can point elsewhere), and whose simulated runtime, if it has one
    (``berth.dev/simulated-runtime``), is a duration (read when it is admitted: a bad one
    then failed each batch of admissions it was in, and its own admission was dropped with
    its quota held). The spec is returned so that announcing the workload does not read the
    object a second time; with ``specs``, a spec an equal object gave is taken from there
    (:meth:`SpecMemo.spec` says when).
    """
    try:
        obj = msgspec.json.decode(value)
        ref = check_identity(obj)
        spec = workload_spec(obj) if specs is None else specs.spec(obj)
    except msgspec.DecodeError as error:
        return f"not JSON: {error}"
    except WorkloadError as error:
        return str(error)
    expected = workload_key(ref.namespace, ref.name)
    if key != expected:
        return f"stored under key {key!r}, but {ref.key} belongs under {expected!r}"
    if not isinstance(obj, dict):  # pragma: no cover - check_identity refused it
        return "not a mapping"
    runtime = (obj["metadata"].get("annotations") or {}).get(SIMULATED_RUNTIME_ANNOTATION)
    if runtime is not None:
        try:
            simulated_seconds(runtime)  # a string: workload_spec checked the annotations
        except ValueError as error:
            return f"`metadata.annotations.{SIMULATED_RUNTIME_ANNOTATION}`: {error}"
    return obj, spec


def simulated_seconds(text: str) -> float:
    """``parse_duration(text)``: a simulated runtime (``berth.dev/simulated-runtime``) in
    seconds, raising ``ValueError`` as it does. A text read before is not parsed again: each
    workload's runtime was parsed twice (read, then admitted), and a burst of Jobs from one
    template repeats one text. A refusal is never remembered; past
    :data:`SECONDS_MEMO_SIZE` texts everything is forgotten (the bound)."""
    seconds = _seconds.get(text)
    if seconds is None:
        seconds = parse_duration(text)
        if len(_seconds) >= SECONDS_MEMO_SIZE:
            _seconds.clear()
        _seconds[text] = seconds
    return seconds


def read_status(value: bytes) -> dict[str, Any] | str:
    """A status record the watcher wrote (phase, generation, pids, uid), or why it is not."""
    try:
        status = msgspec.json.decode(value)
    except msgspec.DecodeError as error:
        return f"not JSON: {error}"
    if not isinstance(status, dict):
        return "a status must be a mapping"
    generation = status.get("generation", 0)
    pids = status.get("pids") or []
    if not isinstance(status.get("uid"), str):
        return "`uid` must be a string"
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        return f"`generation` must be a non-negative integer, got {generation!r}"
    if not isinstance(pids, list) or not all(
        isinstance(pid, int) and not isinstance(pid, bool) and 1 < pid < 2**31 for pid in pids
    ):
        return "`pids` must be a list of process ids (never 0 or 1: their group is ours, or init)"
    if not isinstance(status.get("phase", ""), str):
        return "`phase` must be a string"
    return status


def find_object(
    objects: dict[str, dict[str, Any]], ref: WorkloadRef, *, any_uid: bool = False
) -> tuple[str, dict[str, Any]] | None:
    """The bucket key and object a decision names, or None: deleted, or replaced by another
    object of the same name (``any_uid``: the CLI's remove names no uid, any will do)."""
    key = workload_key(ref.namespace, ref.name)
    obj = objects.get(key)
    if obj is None or (obj["metadata"]["uid"] != ref.uid and not any_uid):
        return None
    return key, obj
