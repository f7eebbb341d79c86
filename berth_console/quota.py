"""Quota per ClusterQueue, flavor and resource: nominal, in use, borrowed and lent.

Nominal quota and limits come from the ClusterQueue's spec; what is in use and borrowed from
the status admission reports (Kueue's ``flavorsUsage``: ``total`` and ``borrowed``). Kueue
reports no per-queue "lent" figure, so it is estimated here: in each cohort, what its queues
borrow of a flavor's resource is shared among the queues that have unused quota to lend (up
to their ``lendingLimit``), in proportion to what each could lend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from shared.quantities import QuantityError, format_quantity, is_binary_resource, parse_quantity
from shared.queue_usage import quota_usage

__all__ = ["Quota", "quotas", "show"]


@dataclass(frozen=True, slots=True)
class Quota:
    flavor: str
    resource: str
    nominal: int  # milli-units, as every figure here
    used: int  # in use, borrowed included
    borrowed: int
    lent: int = 0  # estimated (see the module's docstring)
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def own_used(self) -> int:
        """In use within the queue's own nominal quota."""
        return min(self.used - self.borrowed, self.nominal)

    @property
    def lendable(self) -> int:
        """Unused nominal quota others may borrow."""
        free = max(self.nominal - self.own_used, 0)
        return free if self.lending_limit is None else min(free, self.lending_limit)


def show(resource: str, milli: int) -> str:
    """A quantity as Kubernetes writes it (``4``, ``500m``, ``16Gi``)."""
    return format_quantity(milli, binary=is_binary_resource(resource))


def _milli(value: Any) -> int:
    if value is None:
        return 0
    try:
        return parse_quantity(value)
    except QuantityError:
        return 0  # admission validated the spec; a figure it could not have written reads 0


def _own(queue: dict[str, Any]) -> list[Quota]:
    return [
        Quota(
            flavor=flavor,
            resource=resource["name"],
            nominal=_milli(resource.get("nominalQuota")),
            used=_milli(used.get("total")),
            borrowed=_milli(used.get("borrowed")),
            borrowing_limit=None
            if resource.get("borrowingLimit") is None
            else _milli(resource["borrowingLimit"]),
            lending_limit=None
            if resource.get("lendingLimit") is None
            else _milli(resource["lendingLimit"]),
        )
        for flavor, resource, used in quota_usage(queue)
    ]


def quotas(queues: Iterable[dict[str, Any]]) -> dict[str, list[Quota]]:
    """Every ClusterQueue's quotas, by name, with the lent estimate of its cohort."""
    by_queue: dict[str, list[Quota]] = {}
    cohort_of: dict[str, str] = {}
    for queue in queues:
        name = queue["metadata"]["name"]
        spec = queue.get("spec", {})
        by_queue[name] = _own(queue)
        cohort_of[name] = spec.get("cohortName") or spec.get("cohort") or ""
    # Per cohort and (flavor, resource): what its queues borrow, and who could have lent it.
    borrowed: dict[tuple[str, str, str], int] = {}
    lendable: dict[tuple[str, str, str], int] = {}
    for name, items in by_queue.items():
        cohort = cohort_of[name]
        if not cohort:
            continue
        for quota in items:
            key = (cohort, quota.flavor, quota.resource)
            borrowed[key] = borrowed.get(key, 0) + quota.borrowed
            lendable[key] = lendable.get(key, 0) + quota.lendable
    for name, items in by_queue.items():
        cohort = cohort_of[name]
        if not cohort:
            continue
        for index, quota in enumerate(items):
            key = (cohort, quota.flavor, quota.resource)
            total_borrowed = borrowed.get(key, 0) - quota.borrowed  # others' borrowing
            pool = lendable.get(key, 0)
            if total_borrowed > 0 and pool > 0 and quota.lendable > 0:
                share = min(total_borrowed * quota.lendable // pool, quota.lendable)
                items[index] = replace(quota, lent=share)
    return by_queue
