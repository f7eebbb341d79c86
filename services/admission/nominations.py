"""Preemptions in flight: which preemptor waits for which victims to leave.

A preemptor is nominated (services/admission/queues.py: it goes first in its ClusterQueue and
nothing passes it) while the victims evicted for it are leaving, so the room they free is its
own. The nomination ends once the last of them has left (evicted, finished or deleted): a
preemptor that still does not fit must not hold its ClusterQueue blocked; preemption looks at
it again.
"""

from __future__ import annotations

from shared.events import WorkloadRef

__all__ = ["Nominations"]


class Nominations:
    def __init__(self) -> None:
        self._leaving: dict[str, set[str]] = {}  # preemptor uid -> victims still leaving
        self._preemptor_of: dict[str, WorkloadRef] = {}  # victim uid -> its preemptor
        self._released: list[WorkloadRef] = []  # preemptors whose victims have all left

    def add(self, preemptor: WorkloadRef, victim_uid: str) -> None:
        """``victim_uid`` is being evicted for ``preemptor``."""
        self._leaving.setdefault(preemptor.uid, set()).add(victim_uid)
        self._preemptor_of[victim_uid] = preemptor

    def left(self, uid: str) -> WorkloadRef | None:
        """``uid`` is gone; if it was its preemptor's last victim, the preemptor is released
        (and returned)."""
        preemptor = self._preemptor_of.pop(uid, None)
        if preemptor is None:
            return None
        leaving = self._leaving.get(preemptor.uid)
        if leaving is not None:
            leaving.discard(uid)
            if not leaving:
                del self._leaving[preemptor.uid]
                self._released.append(preemptor)
                return preemptor
        return None

    def take_released(self) -> list[WorkloadRef]:
        """The preemptors whose victims have all left since the last call, in that order."""
        released, self._released = self._released, []
        return released

    def leaving(self, preemptor_uid: str) -> frozenset[str]:
        """The victims ``preemptor_uid`` still waits for (none when it is not nominated)."""
        return frozenset(self._leaving.get(preemptor_uid, ()))
