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
        # what was read -> its spec, and the ``spec`` mapping of the object it was read from
        self.specs: dict[bytes, tuple[WorkloadSpec, Any]] = {}

    def spec(self, obj: dict[str, Any]) -> WorkloadSpec:
        """``workload_spec(obj)``, or the spec an earlier object gave if it is of a kind in
        :data:`MEMO_KINDS` and has the same kind, apiVersion, labels, annotations and
        ``spec`` (compared as JSON: equal JSON, equal inputs). Raises as ``workload_spec``
        does; a refusal is never remembered (each bad object is read and refused again).

        Why: ``workload_spec`` (every field checked, every quantity parsed) was most of the
        watcher's cost of reading an object, and a burst of Jobs from one template repeats
        it with nothing changed but the name. An object whose spec is taken so is given the
        equal object's ``spec`` mapping in place of its own (equal JSON, so equal contents):
        the objects of one template hold one copy, not one each, and their pod specs are the
        ones the returned spec holds. That is sound because the local backend never writes
        into an object it has read: a shared mapping stays as it was read.
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
        remembered = self.specs.get(key)
        if remembered is None:
            spec = workload_spec(obj)
            if len(self.specs) >= self.size:
                del self.specs[next(iter(self.specs))]
            self.specs[key] = (spec, obj.get("spec"))
            return spec
        spec, obj["spec"] = remembered
        return spec
