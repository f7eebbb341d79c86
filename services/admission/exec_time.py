"""Kueue's maximumExecutionTimeSeconds: a workload admitted for longer than its limit, summed
over all its admissions, is evicted and deactivated, Evicted reason
``DeactivatedDueToMaximumExecutionTimeExceeded`` (the one deactivation: deactivation.py); it
is not admitted again until it is resumed (``berth resume workload``), with a fresh budget.

The limit is Kueue's ``kueue.x-k8s.io/max-exec-time-seconds`` annotation on the job. Every
input is an event time, so a replay after a restart rebuilds the same clocks, and the
eviction's own event marks the workload past its limit (activation.py folds it).
"""

from __future__ import annotations

from services.admission.deactivation import EXEC_CAUSE, Deactivation

__all__ = ["DEACTIVATION", "MAX_EXEC_TIME_ANNOTATION", "REASON", "ExecutionLimits"]

MAX_EXEC_TIME_ANNOTATION = "kueue.x-k8s.io/max-exec-time-seconds"
REASON = EXEC_CAUSE  # the deactivation's cause (Kueue's)
MESSAGE = "exceeding the maximum execution time"  # what follows "deactivated due to"
DEACTIVATION = Deactivation(REASON, MESSAGE)


class ExecutionLimits:
    """Each limited workload's limit, time used by earlier admissions and current start."""

    def __init__(self) -> None:
        self.limit: dict[str, int] = {}
        self.used: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.exceeded: set[str] = set()  # evicted for it: deactivated

    def submitted(self, uid: str, annotations: dict[str, str]) -> None:
        """Read the limit; a value that is not a positive whole number sets none (Kueue's
        webhook refuses it; the submit warning names the annotation)."""
        text = annotations.get(MAX_EXEC_TIME_ANNOTATION, "")
        if text.isdigit() and int(text) > 0:
            self.limit[uid] = int(text)

    def admitted(self, uid: str, at: float) -> None:
        if uid in self.limit:
            self.started.setdefault(uid, at)

    def stopped(self, uid: str, at: float) -> None:
        """An eviction or a finish ends the current run; its time counts."""
        start = self.started.pop(uid, None)
        if start is not None:
            self.used[uid] = self.used.get(uid, 0.0) + max(0.0, at - start)

    def reactivated(self, uid: str, at: float) -> None:
        """A workload deactivated for its limit is resumed: its budget starts again (Kueue
        clears ``accumulatedPastExecutionTimeSeconds`` when the limit deactivates it), a
        run still going counting from ``at``. One stopped for another reason keeps what it
        used, as in Kueue."""
        if uid not in self.exceeded:
            return
        self.exceeded.discard(uid)
        self.used.pop(uid, None)
        if uid in self.started:
            self.started[uid] = at

    def forget(self, uid: str) -> None:
        for table in (self.limit, self.used, self.started):
            table.pop(uid, None)
        self.exceeded.discard(uid)

    def due(self, now: float) -> list[str]:
        """Running workloads whose limit has passed, each reported once."""
        out = []
        for uid, start in self.started.items():
            if uid in self.exceeded:
                continue
            if self.used.get(uid, 0.0) + (now - start) >= self.limit[uid]:
                self.exceeded.add(uid)
                out.append(uid)
        return sorted(out)
