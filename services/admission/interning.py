"""One shared copy of what many pending workloads repeat, so a million of them fit in memory.

Each ``WorkloadSubmitted`` decoded from the bus carries its own copies of strings and
containers that thousands of workloads share: the namespace, the LocalQueue's name, the kind,
the pod sets (a list, a ``PodSet`` and a requests dict per workload), the labels and the
annotations. :meth:`Interner.submitted` keeps one copy of each distinct value and returns the
event built from those copies; what it keeps is what the fold and the displays read.

Shared containers are never mutated: the records, the scheduler and the renderers only read
them (``render_workload`` copies the labels it hands out).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import msgspec

from shared.events import PodSet, WorkloadRef, WorkloadSubmitted

__all__ = ["TABLE_LIMIT", "Generations", "Interner", "kept_once"]

_encode = msgspec.json.Encoder().encode


# Each table forgets everything once it holds this many values: values unique to one
# workload (a label naming its job) must not pile up after the workload is gone. What was
# shared stays shared; what comes after starts sharing anew.
TABLE_LIMIT = 10_000


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def kept_once(table: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """The value ``table`` keeps for ``key``, made by ``make`` if it has none; a table that
    holds ``TABLE_LIMIT`` values forgets them all first."""
    found = table.get(key)
    if found is None:
        if len(table) >= TABLE_LIMIT:
            table.clear()
        found = table[key] = make()
    return found


class Generations(Generic[K, V]):
    """A kept-once table in two generations, for values shared by a set of things that can
    be as large as the table (one per LocalQueue: 10,000 LocalQueues fill it): when the
    newest holds ``TABLE_LIMIT`` values it becomes the older one and the older one is
    forgotten; a value found in the older one is kept in the newest again. So a working set
    up to ``TABLE_LIMIT`` is never made twice (a plain table made all of it anew each time
    it filled), and what is no longer asked for is forgotten within two turns."""

    __slots__ = ("_new", "_old")

    def __init__(self) -> None:
        self._new: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def kept(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, made by ``make`` if neither generation has one."""
        found = self._new.get(key)
        if found is None:
            found = self._old.get(key)
            if found is None:
                found = make()
            if len(self._new) >= TABLE_LIMIT:
                self._old, self._new = self._new, {}
            self._new[key] = found
        return found


class Interner:
    """Distinct values seen lately, each kept once (at most ``TABLE_LIMIT`` per table)."""

    __slots__ = ("_dicts", "_numbers", "_pod_sets")

    def __init__(self) -> None:
        self._pod_sets: dict[bytes, list[PodSet]] = {}
        # Labels are often one dict per LocalQueue: as many as there are LocalQueues.
        self._dicts: Generations[tuple[tuple[str, str], ...], dict[str, str]] = Generations()
        # Python keeps only -5..256 once: a priority of 1000 decoded is an int of its own.
        self._numbers: dict[int, int] = {}

    def submitted(self, event: WorkloadSubmitted) -> WorkloadSubmitted:
        """The event as admission keeps it for as long as the workload is known: its values
        shared with every other workload that has the same ones; the event's own ``id``,
        ``time`` and ``source`` are dropped (``time`` becomes ``created``): nothing reads
        them after the fold, which has already used them."""
        ref = event.workload
        return msgspec.structs.replace(
            event,
            id="",
            time=event.created,
            source="",
            workload=WorkloadRef(sys.intern(ref.namespace), ref.name, ref.uid),
            kind=sys.intern(event.kind),
            queue_name=sys.intern(event.queue_name),
            pod_sets=self.pod_sets(event.pod_sets),
            priority_class=sys.intern(event.priority_class),
            priority_class_name=sys.intern(event.priority_class_name),
            priority=None if event.priority is None else self.number(event.priority),
            labels=self.strings(event.labels),
            annotations=self.strings(event.annotations),
        )

    def number(self, value: int) -> int:
        """The one int equal to ``value``."""
        return kept_once(self._numbers, value, lambda: value)

    def pod_sets(self, pod_sets: list[PodSet]) -> list[PodSet]:
        """The one list equal to ``pod_sets`` (same names, counts, requests, minimum counts)."""
        return kept_once(
            self._pod_sets,
            _encode(pod_sets),
            lambda: [
                PodSet(
                    sys.intern(p.name),
                    p.count,
                    {sys.intern(r): q for r, q in p.requests.items()},
                    p.min_count,
                )
                for p in pod_sets
            ],
        )

    def strings(self, values: dict[str, str]) -> dict[str, str]:
        """The one dict equal to ``values`` (labels, annotations), in the same order."""
        return self._dicts.kept(
            tuple(values.items()), lambda: {sys.intern(k): v for k, v in values.items()}
        )
