"""Everything the console shows, in memory: workloads, recent events, queues, managed jobs.

One writer (the bus feed, ``feed.py``) and many readers (the pages); all in one event loop,
so no locks. Each change bumps a topic in :class:`Changes` for the live pages:

- ``workloads``: a workload row changed; ``events``: an event was appended;
- ``queues``: admission's ClusterQueue and LocalQueue status was refreshed;
- ``jobs``: a managed-job record changed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from berth_console.changes import Changes
from berth_console.workloads import WorkloadTable
from shared.events import AnyEvent
from shared.fencing import Fence, Verdict
from shared.jobs import ManagedJob

__all__ = ["RECENT_EVENTS", "Model", "Recent"]

RECENT_EVENTS = 2000  # events kept for the feed and for pages opened just now
HISTORY_SAMPLES = 120  # pending-over-time points per ClusterQueue
SAMPLE_EVERY_S = 5.0  # ... one at most this often: 120 points are ten minutes


@dataclass(frozen=True, slots=True)
class Recent:
    """An event as the feed keeps it: its stream sequence and subject, decoded, and the
    ClusterQueue it concerns (a fact's is its workload's, noted before a deletion)."""

    seq: int
    subject: str
    event: AnyEvent
    cluster_queue: str = ""


class Model:
    def __init__(self) -> None:
        self.changes = Changes()
        self.workloads = WorkloadTable()
        self.recent: deque[Recent] = deque(maxlen=RECENT_EVENTS)
        self.dropped_seq = 0  # the stream sequence of the newest event pushed out of recent
        self.seq = 0  # the last stream sequence folded
        # The services' fence (shared/fencing.py): a deposed leader's late decisions count for
        # nothing, so the console shows none of them. It reads the stream from its start, so
        # a fence fed everything in order is the services' own.
        self.fence = Fence()
        self.voided = 0
        self.caught_up = False  # folded everything the stream held when the console started
        self.cluster_queues: dict[str, dict[str, Any]] = {}  # admission's ClusterQueue objects
        self.local_queues: list[dict[str, Any]] = []
        self.cohort_objects: dict[str, dict[str, Any]] = {}  # admission's Cohort objects
        self.queues_at = 0.0  # when admission last answered (0: never)
        self.queues_error = ""  # why the last refresh failed, shown on the pages
        self.pending_history: dict[str, deque[tuple[float, int]]] = {}
        self.jobs: dict[int, ManagedJob] = {}
        # Pages shared by every browser (pages/base.py): key -> (versions, when, snapshot).
        self.snapshots: dict[str, tuple[tuple[int, ...], float, Any]] = {}
        # Fragments pages rendered, by key, with the inputs they were rendered from.
        self.fragments: dict[str, tuple[object, Any]] = {}

    # --- writers (the bus feed) ------------------------------------------------------------

    def apply(self, seq: int, subject: str, event: AnyEvent) -> None:
        """Fold one event of the stream stored alone (:meth:`apply_message` of one)."""
        self.apply_message(seq, [(subject, event)])

    def apply_message(self, seq: int, events: Sequence[tuple[str, AnyEvent]]) -> None:
        """Fold what one stored message adds, each event with its per-workload subject (a
        batch's events in order); a sequence seen before is ignored, and one that adds
        nothing (a copy) is passed."""
        if seq <= self.seq:
            return
        self.seq = seq
        for subject, event in events:
            self._fold(seq, subject, event)

    def _fold(self, seq: int, subject: str, event: AnyEvent) -> None:
        verdict = self.fence.judge(event)
        if verdict is Verdict.VOID:
            self.voided += 1
            return
        queue = getattr(event, "cluster_queue", None)
        if not isinstance(queue, str):
            row = self.workloads.rows.get((event.workload.namespace, event.workload.name))
            queue = row.cluster_queue if row is not None else ""
        if len(self.recent) == self.recent.maxlen:
            self.dropped_seq = self.recent[0].seq
        self.recent.append(Recent(seq, subject, event, queue))  # a leader's marker too
        if verdict is Verdict.KEEP and self.workloads.apply(event) is not None:
            self.changes.bump("workloads", "events")
        else:
            self.changes.bump("events")

    def set_queues(
        self,
        cluster_queues: list[dict[str, Any]],
        local_queues: list[dict[str, Any]],
        cohorts: Sequence[dict[str, Any]] = (),  # admission's Cohort objects
    ) -> None:
        now = time.time()
        self.cluster_queues = {item["metadata"]["name"]: item for item in cluster_queues}
        self.local_queues = local_queues
        self.cohort_objects = {item["metadata"]["name"]: item for item in cohorts}
        self.queues_at = now
        self.queues_error = ""
        for name, item in self.cluster_queues.items():
            samples = self.pending_history.setdefault(name, deque(maxlen=HISTORY_SAMPLES))
            pending = int(item.get("status", {}).get("pendingWorkloads", 0))
            if samples and now - samples[-1][0] < SAMPLE_EVERY_S:
                samples[-1] = (samples[-1][0], pending)  # the newest point shows the latest
            else:
                samples.append((now, pending))
        for gone in set(self.pending_history) - set(self.cluster_queues):
            del self.pending_history[gone]
            self.fragments.pop(f"cq-row:{gone}", None)
        self.changes.bump("queues")

    def queues_failed(self, reason: str) -> None:
        if reason != self.queues_error:
            self.queues_error = reason
            self.changes.bump("queues")

    def set_job(self, job: ManagedJob) -> None:
        self.jobs[job.id] = job
        self.changes.bump("jobs")

    def drop_job(self, job_id: int) -> None:
        if self.jobs.pop(job_id, None) is not None:
            self.changes.bump("jobs")

    # --- readers (the pages) ---------------------------------------------------------------

    def recent_after(self, seq: int, keep: Callable[[Recent], bool]) -> Iterator[Recent]:
        """Events after stream sequence ``seq`` that ``keep`` accepts, oldest first."""
        if not self.recent or self.recent[-1].seq <= seq:
            return
        for item in self.recent:
            if item.seq > seq and keep(item):
                yield item

    def missed_since(self, seq: int) -> bool:
        """Whether events after ``seq`` already fell out of :attr:`recent` (a page that fell
        that far behind reads its history again)."""
        return self.dropped_seq > seq

    def cohorts(self) -> dict[str, list[str]]:
        """ClusterQueue names by cohort ("" for none), both sorted."""
        groups: dict[str, list[str]] = {}
        for name, item in sorted(self.cluster_queues.items()):
            spec = item.get("spec", {})
            groups.setdefault(spec.get("cohortName") or spec.get("cohort") or "", []).append(name)
        return dict(sorted(groups.items(), key=lambda pair: (pair[0] == "", pair[0])))

    def cohort_share(self, name: str) -> int | None:
        """A Cohort object's status.fairSharing.weightedShare (None: no such object, or fair
        sharing is off)."""
        status = self.cohort_objects.get(name, {}).get("status", {})
        share = status.get("fairSharing", {}).get("weightedShare")
        return None if share is None else int(share)

    def job_of_workload(self, namespace: str, name: str) -> ManagedJob | None:
        for job in self.jobs.values():
            if job.namespace == namespace and any(a.name == name for a in job.attempts):
                return job
        return None
