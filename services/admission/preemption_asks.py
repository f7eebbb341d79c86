"""Whether a pending report asks the preemption service for help, and the asks held back until
a candidate may exist (Kueue's preemption oracle, SimulatePreemption's NoCandidates).

Kueue's flavor assigner asks, for a flavor that needs preemption, whether its candidate search
finds anyone at all; with no candidate the workload simply waits for quota, and its scheduler
logs "Workload requires preemption, but there are no candidate workloads allowed for
preemption". Berth's search runs in another service, so admission asks it with
``preemption_may_help`` on the pending report. Asking when no candidate can exist costs a
report sent at once instead of held (pending_throttle.py), a search, and a second report back;
in the Kueue benchmark those were most of what the preemption service did, and most of its
evictions were of workloads that had finished by the time it decided.

So admission answers the first question itself (:func:`shared.candidates.may_find_candidates`,
on what it knows now) and, where no candidate may exist, publishes the report without the ask
and with Kueue's reason appended (:func:`without_ask`). The report is held
(:class:`PreemptionAsks`) and asked again as soon as a candidate may exist. Only an admission
can make one (a running workload of lower priority in its ClusterQueue, a ClusterQueue of its
cohort tree that borrows now), or a higher priority of the workload (an ageing boost), or a
new configuration; releases never do.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import msgspec

from services.admission.workload_objects import WorkloadRecord
from shared.candidates import NO_CANDIDATES, AskFacts, may_find_candidates
from shared.events import WorkloadPending, WorkloadRef, new_event_id, now

__all__ = [
    "UNKNOWN_PRIORITY",
    "AdmittedPriorities",
    "AskCore",
    "Contested",
    "PreemptionAsks",
    "ReportsAgain",
    "taken_over",
    "without_ask",
]

# What a workload of unknown priority counts as: below every int32 priority.
UNKNOWN_PRIORITY = -(2**31) - 1

# Heap entries beyond twice the held reports before the heaps are built anew.
STALE_SLACK = 1024

Contested = tuple[tuple[str, str], ...]  # the flavor-resources a report contests
_Key = tuple[str, Contested]  # a ClusterQueue and what its held reports contest


class AskCore(Protocol):
    """What :class:`PreemptionAsks` reads of the admission core (placement.py)."""

    def ask_facts(self, ref: WorkloadRef, cq_name: str, contested: Contested) -> AskFacts | None:
        """What the core knows of a workload pending in ``cq_name`` (None: not pending there)."""

    def grown(self) -> dict[str, int]:
        """Per ClusterQueue, the lowest base priority admitted there since the last call."""

    def root(self, cq_name: str) -> str:
        """The root of ``cq_name``'s cohort tree."""

    def borrows_in(self, cq_name: str) -> frozenset[tuple[str, str]]:
        """The flavor-resources ``cq_name`` borrows in now."""


def taken_over(
    asks: PreemptionAsks, records: Iterable[WorkloadRecord], core: ReportsAgain
) -> None:
    """A replica that takes over clears what it held (it may be stale) and has the workloads
    whose report shown now went without the ask decided and reported again in its first
    pass: another leader may have sent it, one this replica never held, and the pass would
    otherwise send nothing for an unchanged decision."""
    asks.clear()
    for record in records:
        told = record.conditions.get("QuotaReserved")
        if told is not None and told.status == "False" and told.message.endswith(NO_CANDIDATES):
            core.report_again(record.ref)


class ReportsAgain(Protocol):
    def report_again(self, ref: WorkloadRef) -> None:
        """Decide a pending workload again in the next pass and report it
        (services/admission/placement.py)."""


def without_ask(report: WorkloadPending) -> WorkloadPending:
    """``report`` as published when no candidate may exist: no ask, Kueue's reason appended."""
    return msgspec.structs.replace(
        report, preemption_may_help=False, message=f"{report.message}; {NO_CANDIDATES}"
    )


@dataclass(slots=True)
class _Held:
    report: WorkloadPending  # the report with its ask, as the core decided it (id "")
    key: _Key  # the heap it stands in
    priority: int  # where it stands there


class PreemptionAsks:
    """The reports published without their ask, until a candidate may exist.

    Each held report stands in the heap of its ClusterQueue and contested flavor-resources,
    highest priority first. After admissions, the heaps they may have changed are judged
    again from the top, stopping at the first report that still finds no candidate: with the
    same ClusterQueue and contested resources, a lower priority cannot find one a higher one
    does not (:func:`shared.candidates.may_find_candidates`)."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}  # uid -> its held report
        # heap of (-priority, order, uid) per key; an entry whose uid is gone or stands
        # elsewhere since is dropped when it comes out, or when the heaps are built anew
        self._heaps: dict[_Key, list[tuple[int, int, str]]] = {}
        self.entries = 0  # in all heaps, stale ones included (built anew past STALE_SLACK)
        self._of_queue: dict[str, set[_Key]] = {}  # ClusterQueue -> its keys
        self._of_root: dict[str, set[_Key]] = {}  # cohort tree root -> the keys under it
        self._root_of: dict[_Key, str] = {}
        self._order = 0
        self._judge_all = False  # a new configuration: every held report is judged again
        self._boosted: set[str] = set()  # held workloads whose priority may have changed

    def __len__(self) -> int:
        return len(self._held)

    @property
    def holding(self) -> Mapping[str, object]:
        """The held reports by workload uid (read it, never change it): empty on most
        clusters, so a caller with many reports to judge asks it before each ``forget``."""
        return self._held

    def hold(
        self, report: WorkloadPending, facts: AskFacts | None, root: str, contested: Contested
    ) -> bool:
        """Whether ``report`` (one the core decided, asking preemption: its flavor assignment
        says preemption may help) goes out without its ask (:func:`without_ask`) because
        ``facts`` show no candidate may exist; then it is held until one may, in place of
        any report of its workload held before. ``facts`` None: the core does not have it
        pending (nothing is held); ``root``: its cohort tree's; ``contested``:
        :func:`contested_of` the report."""
        uid = report.workload.uid
        before = self._held.pop(uid, None) if self._held else None
        if facts is None or may_find_candidates(facts):
            return False
        key = (report.cluster_queue, contested)
        if before is not None and before.key == key and before.priority == facts.priority:
            before.report = report  # its heap entry stands for it still
            self._held[uid] = before
            return True
        self._stand(_Held(report, key, facts.priority), root)
        return True

    def forget(self, uid: str) -> None:
        """Its newest report does not need a held ask, or the workload was admitted,
        finished or deleted: its held report goes."""
        if self._held:
            self._held.pop(uid, None)

    def boosted(self, uid: str) -> None:
        """The workload's ageing boost or reservation changed: judged again at the next look."""
        if uid in self._held:
            self._boosted.add(uid)

    def reconfigured(self) -> None:
        """A new configuration: every held report is judged again at the next look (its
        ClusterQueue may be in another cohort tree now)."""
        if self._held:
            self._judge_all = True

    def clear(self) -> None:
        """Nothing is held (a replica taking over: what it held may be stale)."""
        self._held.clear()
        self._rebuild({})

    def asked(self, core: AskCore) -> list[WorkloadPending]:
        """The held reports for which a candidate may exist now, each with its ask (a new
        id, this moment) and let go; what the core admitted since the last look is read
        (``core.grown``) even when nothing is held."""
        grown = core.grown()
        if not self._held:
            if self.entries:
                self._rebuild({})
            return []
        asked: list[WorkloadPending] = []
        if self._judge_all:
            self._judge_all = False
            self._boosted.clear()
            held_all = list(self._held.values())
            self._held.clear()
            self._rebuild({})
            for held in held_all:
                if not self._judge(held, core, asked):
                    self._stand(held, core.root(held.key[0]))
        elif self._boosted:
            for uid in self._boosted:
                boosted = self._held.get(uid)
                if boosted is not None:
                    self._judge_held(boosted, core, asked)
            self._boosted.clear()
        for key in self._touched(grown, core):
            heap = self._heaps[key]
            while heap:
                _, _, uid = heap[0]
                top = self._held.get(uid)
                if top is None or top.key != key or -heap[0][0] != top.priority:
                    heapq.heappop(heap)  # gone, or standing elsewhere since
                    self.entries -= 1
                    continue
                if not self._judge_held(top, core, asked) and top.priority == -heap[0][0]:
                    break  # the highest priority still finds none: the lower ones neither
        if self.entries > 2 * len(self._held) + STALE_SLACK:
            self._rebuild(dict(self._root_of))
        return asked

    def _touched(self, grown: dict[str, int], core: AskCore) -> set[_Key]:
        """The keys whose heads may find a candidate after the admissions ``grown``: those of
        a ClusterQueue that admitted a priority at most their highest; those under the same
        root as a ClusterQueue that admitted and borrows now in what they contest."""
        touched: set[_Key] = set()
        heaps = self._heaps
        borrowed: dict[str, set[tuple[str, str]]] = {}  # root -> what is borrowed in now
        for cq_name, lowest in grown.items():
            for key in self._of_queue.get(cq_name, ()):
                heap = heaps[key]
                if heap and -heap[0][0] >= lowest:
                    touched.add(key)
            if (root := core.root(cq_name)) in self._of_root and (frs := core.borrows_in(cq_name)):
                borrowed.setdefault(root, set()).update(frs)
        for root, lent in borrowed.items():
            touched.update(key for key in self._of_root[root] if not lent.isdisjoint(key[1]))
        return touched

    def _judge_held(self, held: _Held, core: AskCore, asked: list[WorkloadPending]) -> bool:
        """:meth:`_judge` of a report held now: let go, or standing at its priority now (an
        entry at another one goes stale)."""
        priority = held.priority
        if self._judge(held, core, asked):
            del self._held[held.report.workload.uid]
            return True
        if held.priority != priority:
            self._stand(held, self._root_of[held.key])
        return False

    def _judge(self, held: _Held, core: AskCore, asked: list[WorkloadPending]) -> bool:
        """Whether ``held`` is to be let go: asked (appended to ``asked``), or no longer
        pending where it was held. Else its priority is the one it has now."""
        report = held.report
        facts = core.ask_facts(report.workload, report.cluster_queue, held.key[1])
        if facts is None:
            return True
        if may_find_candidates(facts):
            asked.append(
                msgspec.structs.replace(
                    report, id=new_event_id(), time=now(), priority=facts.priority
                )
            )
            return True
        held.priority = facts.priority
        return False

    def _stand(self, held: _Held, root: str) -> None:
        """Hold ``held``: put it in its heap at its priority (an earlier entry of its
        workload goes stale), that heap under ``root``."""
        key = held.key
        self._held[held.report.workload.uid] = held
        heap = self._heaps.get(key)
        if heap is None:
            heap = self._heaps[key] = []
            self._of_queue.setdefault(key[0], set()).add(key)
            self._of_root.setdefault(root, set()).add(key)
            self._root_of[key] = root
        self._order += 1
        self.entries += 1
        heapq.heappush(heap, (-held.priority, self._order, held.report.workload.uid))

    def _rebuild(self, roots: dict[_Key, str]) -> None:
        """The heaps and their indexes anew from what is held, each key under its root in
        ``roots`` (stale entries gone)."""
        self._heaps.clear()
        self._of_queue.clear()
        self._of_root.clear()
        self._root_of.clear()
        self.entries = 0
        for held in list(self._held.values()):
            self._stand(held, roots[held.key])


class AdmittedPriorities:
    """Per ClusterQueue, how many admitted workloads have each base priority: its lowest is
    what :func:`shared.candidates.may_find_candidates` reads. A workload of unknown priority
    (an admission restored before its submission was read) counts as the lowest there is."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}

    def add(self, cluster_queue: str, priority: int | None) -> None:
        counts = self._counts.setdefault(cluster_queue, {})
        key = UNKNOWN_PRIORITY if priority is None else priority
        counts[key] = counts.get(key, 0) + 1

    def remove(self, cluster_queue: str, priority: int | None) -> None:
        counts = self._counts.get(cluster_queue)
        key = UNKNOWN_PRIORITY if priority is None else priority
        if counts is None or key not in counts:
            return
        if counts[key] > 1:
            counts[key] -= 1
        else:
            del counts[key]

    def lowest(self, cluster_queue: str) -> int | None:
        """The lowest base priority admitted in ``cluster_queue`` (None: none admitted)."""
        counts = self._counts.get(cluster_queue)
        return min(counts) if counts else None
