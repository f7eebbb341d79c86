"""What admission reads from the stream: the subjects its fold reads (a replay and a standby
are sent all of them) and those its deciding leader is sent (all but its own decisions)."""

from __future__ import annotations

from services.admission.activation import SUBJECTS as ACTIVITY_SUBJECTS
from shared.events import STATE_SUBJECTS
from shared.subjects import pending_reports_of

__all__ = ["FOLDED_SUBJECTS", "OWN_SUBJECTS", "deciding_subjects"]

# What the fold reads: a replay and a standby are sent all of it, the deciding leader all but
# its own admissions and reservations (only admission publishes on these two subjects) and
# its own pending reports (deciding_subjects).
FOLDED_SUBJECTS = (*STATE_SUBJECTS, *ACTIVITY_SUBJECTS)
OWN_SUBJECTS = ("berth.cq.*.admitted.>", "berth.cq.*.reserved.>")


def deciding_subjects(batching: bool) -> tuple[str, ...]:
    """What the deciding leader is sent: the fold's subjects but its own decisions (its
    admissions and reservations it folds when it publishes them; its pending reports need no
    fold), so of the pending reports only preemption's where they have their own subject
    (batches on: :func:`shared.subjects.pending_reports_of`); with batches off it is sent
    both and skips its own (service.py ``_own_echo``)."""
    kept = tuple(s for s in FOLDED_SUBJECTS if s not in OWN_SUBJECTS)
    return pending_reports_of("preemption", kept, batching=batching)
