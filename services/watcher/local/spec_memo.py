"""Remembered workload specs: reading a workload object whose pod sets, queue and priority an
equal object already gave (:class:`SpecMemo`)."""

from __future__ import annotations

from typing import Any

import msgspec

from shared.workloads import WorkloadSpec, workload_spec

__all__ = ["MEMO_KINDS", "MEMO_SIZE", "SpecMemo"]

# The kinds whose spec follows from kind, apiVersion, labels, annotations and ``spec`` alone
# (shared/workload_kinds.py: _job, _pod, _ray_job read nothing else of the object). Not an
# AppWrapper: its pod sets are named after the object (``<name>-<index>``).
MEMO_KINDS = frozenset({"Job", "Pod", "RayJob"})
MEMO_SIZE = 4096  # specs remembered at most; the oldest is forgotten first

_encode = msgspec.json.Encoder().encode


class SpecMemo:
    """The specs of the objects read lately, by what they were read from."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self.size = size
        self.specs: dict[bytes, WorkloadSpec] = {}

    def spec(self, obj: dict[str, Any]) -> WorkloadSpec:
        """``workload_spec(obj)``, or the spec an earlier object gave if it is of a kind in
        :data:`MEMO_KINDS` and has the same kind, apiVersion, labels, annotations and
        ``spec`` (compared as JSON: equal JSON, equal inputs). Raises as ``workload_spec``
        does; a refusal is never remembered (each bad object is read and refused again).

        Why: ``workload_spec`` (every field checked, every quantity parsed) was most of the
        watcher's cost of reading an object, and a burst of Jobs from one template repeats
        it with nothing changed but the name. The spec returned for an equal object holds
        that object's pod specs (equal, not these): read them, never write them.
        """
        if obj.get("kind") not in MEMO_KINDS:
            return workload_spec(obj)
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return workload_spec(obj)  # refused there, with the reason
        key = _encode(
            (
                obj.get("kind"),
                obj.get("apiVersion"),
                metadata.get("labels"),
                metadata.get("annotations"),
                obj.get("spec"),
            )
        )
        spec = self.specs.get(key)
        if spec is None:
            spec = workload_spec(obj)
            if len(self.specs) >= self.size:
                del self.specs[next(iter(self.specs))]
            self.specs[key] = spec
        return spec
