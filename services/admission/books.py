"""Counts and usage per ClusterQueue and LocalQueue, as the statuses and metrics show them.

Kept across config changes (a queue removed and added back shows what it still holds). Usage
is in milli-units per (flavor, resource); "admitted" counts admitted workloads.
"""

from __future__ import annotations

from typing import TypeVar

from services.admission.model import LocalQueueKey
from shared.quota import FlavorResource

__all__ = ["QueueBooks"]

K = TypeVar("K", str, LocalQueueKey)


def _add(
    targets: dict[K, dict[FlavorResource, int]],
    key: K,
    usage: dict[FlavorResource, int],
    sign: int,
) -> None:
    """``usage`` added (``sign`` 1) to or taken (-1) from ``targets[key]``, made if missing
    (no empty dict made and dropped on every call, as ``setdefault(key, {})`` did)."""
    target = targets.get(key)
    if target is None:
        target = targets[key] = {}
    for fr, value in usage.items():
        target[fr] = target.get(fr, 0) + sign * value


class QueueBooks:
    def __init__(self) -> None:
        self.cq_admitted: dict[str, int] = {}
        self.cq_usage: dict[str, dict[FlavorResource, int]] = {}
        self.lq_pending: dict[LocalQueueKey, int] = {}
        self.lq_admitted: dict[LocalQueueKey, int] = {}
        self.lq_usage: dict[LocalQueueKey, dict[FlavorResource, int]] = {}

    def admitted(
        self, cq: str, lq: LocalQueueKey, usage: dict[FlavorResource, int], sign: int
    ) -> None:
        """An admission starts (``sign`` 1) or ends (-1) in ``cq`` through ``lq``."""
        self.cq_admitted[cq] = self.cq_admitted.get(cq, 0) + sign
        _add(self.cq_usage, cq, usage, sign)
        self.lq_admitted_by(lq, usage, sign)

    def lq_admitted_by(
        self, lq: LocalQueueKey, usage: dict[FlavorResource, int], sign: int
    ) -> None:
        """An admission counts for (1) or no longer for (-1) the LocalQueue ``lq``."""
        self.lq_admitted[lq] = self.lq_admitted.get(lq, 0) + sign
        _add(self.lq_usage, lq, usage, sign)

    def queued(self, lq: LocalQueueKey, delta: int) -> None:
        """A workload joins (1) or leaves (-1) the pending ones of ``lq``."""
        self.lq_pending[lq] = self.lq_pending.get(lq, 0) + delta
