"""Who preempted a workload, in Kueue's words, for its Workload's conditions and Events.

Kueue writes the same message on a preempted Workload's ``Preempted`` and ``Evicted``
conditions and on its ``Preempted`` Event (``pkg/scheduler/preemption/preemption.go``,
``preemptionMessage``)::

    Preempted to accommodate a workload (UID: <Workload uid>, JobUID: <Job uid>) due to
    prioritization in the ClusterQueue

Preemption's ``EvictionRequested`` names the preemptor (``preemptor``: its Job's uid, which
is the workload's uid in Berth) and the reason (``detail``: ``InClusterQueue``...); the
preemptor's Workload uid is the one the API server gave the Workload this watcher wrote for
it (``UNKNOWN`` when it wrote none, as Kueue says for an empty uid). Newer Kueue releases
append the preemptor's and the preemptee's cohort paths; Berth does not (see
docs/kubernetes.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from shared.events import EvictionRequested

__all__ = ["HUMAN_READABLE_REASONS", "Preemptors", "preemption_message"]

# Kueue's HumanReadablePreemptionReasons, keyed by the Preempted condition's reason.
HUMAN_READABLE_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
    "": "UNKNOWN",
}
REMEMBERED = 100_000  # preemptions and Workload uids kept (oldest forgotten first)

Obj = dict[str, Any]


def preemption_message(workload_uid: str, job_uid: str, reason: str) -> str:
    """Kueue's message for a workload preempted by the one whose Workload and Job uids are
    given, for ``reason`` (an unknown reason reads as Kueue's map would give it: empty)."""
    return (
        f"Preempted to accommodate a workload (UID: {workload_uid or 'UNKNOWN'}, "
        f"JobUID: {job_uid or 'UNKNOWN'}) due to {HUMAN_READABLE_REASONS.get(reason, '')}"
    )


@dataclass(frozen=True)
class _Preemption:
    preemptor_uid: str  # the preemptor's Job uid (its WorkloadRef's uid)
    reason: str


class Preemptors:
    """The newest preemption of each workload (by key) and the uid of each Workload written
    (by its Job's uid), bounded."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self.limit = limit
        self.preemptions: OrderedDict[str, _Preemption] = OrderedDict()
        self.workload_uids: OrderedDict[str, str] = OrderedDict()

    def note_eviction(self, event: EvictionRequested) -> None:
        if event.reason != "Preempted" or event.preemptor is None:
            return
        self._keep(
            self.preemptions, event.workload.key, _Preemption(event.preemptor.uid, event.detail)
        )

    def note_workload(self, workload: Obj) -> None:
        """A Workload the server holds (created, or listed): its uid, by its Job's uid."""
        metadata = workload.get("metadata") or {}
        job_uid = (metadata.get("labels") or {}).get("kueue.x-k8s.io/job-uid")
        if job_uid and metadata.get("uid"):
            self._keep(self.workload_uids, str(job_uid), str(metadata["uid"]))

    def name_preemptor(self, key: str, workload: Obj) -> None:
        """Put Kueue's message on the Workload's True ``Preempted`` condition, and on a True
        ``Evicted`` one with reason ``Preempted``, when we know who preempted it."""
        preemption = self.preemptions.get(key)
        if preemption is None:
            return
        message = preemption_message(
            self.workload_uids.get(preemption.preemptor_uid, ""),
            preemption.preemptor_uid,
            preemption.reason,
        )
        for condition in (workload.get("status") or {}).get("conditions") or []:
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Preempted" or (
                condition.get("type") == "Evicted" and condition.get("reason") == "Preempted"
            ):
                condition["message"] = message

    def _keep(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self.limit:
            table.popitem(last=False)
