"""NATS subject patterns matched on the client: ``*`` is one token, ``>`` one or more."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = [
    "BATCHED_FAMILIES",
    "BATCH_PREFIX",
    "BATCH_SUBJECTS",
    "BATCH_SUBJECT_OF",
    "FAMILY_PATTERNS",
    "PENDING_FAMILY",
    "PREEMPTION_PENDING_BATCH",
    "batch_subject",
    "batch_subjects_of",
    "batched_filters",
    "covers",
    "overlap",
    "pending_reports_of",
    "publisher_batch_subjects",
    "record_subject",
    "server_filters",
    "subject_family",
    "subject_matcher",
]


def subject_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate true for the subjects any of ``patterns`` matches, as nats-server would.

    One compiled regular expression: it runs for every message a consumer receives, and
    matching token by token in Python costs several calls per token.
    """
    alternatives = "|".join(_regex(pattern) for pattern in patterns)
    match = re.compile(f"(?:{alternatives})").fullmatch
    return lambda subject: match(subject) is not None


def _regex(pattern: str) -> str:
    tokens = []
    for token in pattern.split("."):
        if token == "*":
            tokens.append(r"[^.]+")
        elif token == ">":
            tokens.append(r".+")
        else:
            tokens.append(re.escape(token))
    return r"\.".join(tokens)


def subject_family(subject: str) -> str:
    """A subject without its names: ``berth.cq.<queue>.admitted.<ns>.<name>`` is
    ``cq.*.admitted``, ``berth.wl.started.<ns>.<name>`` is ``wl.started``, any check's
    answer ``check.*``, any lease marker ``lease.*``. What reads and publications are counted
    by (the bus's read counts, the Kueue benchmark's table of subjects)."""
    parts = subject.split(".", 4)
    if len(parts) < 3:
        return subject
    family = parts[1]
    if family == "cq":
        return f"cq.*.{parts[3]}" if len(parts) > 3 else "cq.*"
    if family in ("check", "lease"):
        return f"{family}.*"
    return f"{family}.{parts[2]}"


def covers(wide: str, narrow: str) -> bool:
    """Whether pattern ``wide`` matches every subject pattern ``narrow`` matches
    (``berth.>`` covers ``berth.lease.>``; ``berth.cq.*.admitted.>`` covers
    ``berth.cq.a.admitted.>``, not the reverse)."""
    wide_tokens, narrow_tokens = wide.split("."), narrow.split(".")
    for index, token in enumerate(wide_tokens):
        if token == ">":
            return len(narrow_tokens) > index
        if index >= len(narrow_tokens):
            return False
        other = narrow_tokens[index]
        if other == ">" or (token != "*" and token != other):
            return False
    return len(wide_tokens) == len(narrow_tokens)


def server_filters(patterns: Sequence[str]) -> list[str]:
    """``patterns`` as a consumer's ``filter_subjects``: nats-server refuses filters that
    overlap, so a pattern another one covers is left out (and duplicates), order kept."""
    kept: list[str] = []
    for pattern in patterns:
        if pattern in kept:
            continue
        if any(covers(other, pattern) for other in patterns if other != pattern):
            continue
        kept.append(pattern)
    return kept


# Every family of subject on the event stream (:func:`subject_family`) and the pattern of
# its subjects. The services publish the batched ones in batches (shared/bus/batches.py,
# docs/events.md "Batches"); commands (the watcher reads a name's newest command by its
# subject: services/watcher/command_order.py), the admission checks' answers and the lease
# markers stay one message each.
FAMILY_PATTERNS: dict[str, str] = {
    **{
        f"wl.{verb}": f"berth.wl.{verb}.>"
        for verb in ("submitted", "started", "finished", "evicted", "deleted", "podsready")
    },
    **{
        f"cq.*.{verb}": f"berth.cq.*.{verb}.>"
        for verb in ("admitted", "reserved", "pending", "evict")
    },
    **{
        f"cmd.{verb}": f"berth.cmd.{verb}.>"
        for verb in ("create", "delete", "submit", "remove", "active")
    },
    "job.boost": "berth.job.boost.>",
    "job.status": "berth.job.status.>",
    "check.*": "berth.check.>",
    "lease.*": "berth.lease.>",
}
BATCHED_FAMILIES = frozenset(
    family for family in FAMILY_PATTERNS if family.startswith(("wl.", "cq.", "job."))
)
BATCH_PREFIX = "berth.b."


def batch_subject(family: str) -> str:
    """The subject a batched family's batches are published on: ``berth.b.`` and the family
    without its names (``cq.*.admitted`` -> ``berth.b.cq.admitted``)."""
    return BATCH_PREFIX + family.replace("*.", "")


# Preemption's pending reports (no victims) are batched apart from admission's, so that
# admission's deciding leader is sent preemption's and not its own (docs/events.md).
PENDING_FAMILY = "cq.*.pending"
PREEMPTION_PENDING_BATCH = f"{batch_subject(PENDING_FAMILY)}.preemption"

# batched family -> the subject of its batches (preemption's pending: publisher_batch_subjects)
BATCH_SUBJECT_OF = {family: batch_subject(family) for family in BATCHED_FAMILIES}
# batch subject -> the family its batches carry
BATCH_SUBJECTS = {subject: family for family, subject in BATCH_SUBJECT_OF.items()}
BATCH_SUBJECTS[PREEMPTION_PENDING_BATCH] = PENDING_FAMILY


def record_subject(family: str, *, batching: bool) -> str:
    """Where a batched family's record is published: its batch subject with batches on, its
    per-workload subjects with them off (each event one message). What a tool that reads one
    family's events subscribes to (``shared.bus.batches.record_of`` reads either and skips
    copies); preemption's pending reports have a batch subject of their own besides
    (:func:`batch_subjects_of`)."""
    return batch_subject(family) if batching else FAMILY_PATTERNS[family]


def batch_subjects_of(family: str) -> list[str]:
    """Every subject a batched family's batches are published on: :func:`batch_subject`,
    and for pending reports preemption's (:data:`PREEMPTION_PENDING_BATCH`) too."""
    return [subject for subject, of in BATCH_SUBJECTS.items() if of == family]


def publisher_batch_subjects(source: str) -> dict[str, str]:
    """Batched family -> the subject a service's batches of it go on: preemption's pending
    reports on their own (:data:`PREEMPTION_PENDING_BATCH`), every other on the family's."""
    subjects = dict(BATCH_SUBJECT_OF)
    if source == "preemption":
        subjects[PENDING_FAMILY] = PREEMPTION_PENDING_BATCH
    return subjects


def pending_reports_of(source: str, subjects: Sequence[str], *, batching: bool) -> tuple[str, ...]:
    """``subjects`` for a reader of only the pending reports ``source`` publishes: with
    batches on, that service's batch subject named besides them
    (:func:`publisher_batch_subjects`), which stands for the family (:func:`batched_filters`:
    the other service's batches are not sent); with batches off, as they are, since
    admission's and preemption's reports share their per-workload subjects (the reader tells
    them apart by their ``source``). The family's pattern stays: a stream written before
    batches is read whole (shared/bus/filters.py ``transition_filters``).

    Why: a service that folds only one publisher's pending reports (preemption and recovery
    read admission's; admission's deciding leader preemption's) would otherwise decode the
    other's batches only to drop every event in them."""
    if not batching:
        return tuple(subjects)
    return (*subjects, publisher_batch_subjects(source)[PENDING_FAMILY])


def overlap(first: str, second: str) -> str | None:
    """The pattern of the subjects both patterns match, None if there is none
    (``berth.>`` and ``berth.cmd.submit.>``: ``berth.cmd.submit.>``; ``berth.cq.a.>`` and
    ``berth.cq.*.admitted.>``: ``berth.cq.a.admitted.>``)."""
    left, right = first.split("."), second.split(".")
    tokens: list[str] = []
    for index in range(max(len(left), len(right))):
        a = left[index] if index < len(left) else None
        b = right[index] if index < len(right) else None
        if a == ">" and b is not None:
            return ".".join(tokens + right[index:])
        if b == ">" and a is not None:
            return ".".join(tokens + left[index:])
        if a is None or b is None:
            return None
        if a == "*":
            tokens.append(b)
        elif b in ("*", a):
            tokens.append(a)
        else:
            return None
    return ".".join(tokens)


def batched_filters(patterns: Sequence[str]) -> tuple[list[str], dict[str, bool]]:
    """What a consumer of ``patterns`` is sent when the services publish batches: the
    server's filters, and each batch subject among them with whether the consumer wants
    every event of its family (else each event inside is matched against ``patterns``).

    The rule: the part of a pattern on a batched family becomes that family's batch subject
    (its twin), never the per-workload copies (a service that read both would handle every
    event twice); the part on a single family stays as it is (narrowed to that family). A
    pattern that touches no batched family is kept whole. A batch subject named among the
    patterns stands for its family: every event sent on it, and none of the family's other
    batch subjects (one publisher's pending reports: :func:`pending_reports_of`)."""
    filters: list[str] = []
    twins: dict[str, bool] = {}
    named = {BATCH_SUBJECTS[pattern] for pattern in patterns if pattern in BATCH_SUBJECTS}
    for pattern in patterns:
        if pattern in BATCH_SUBJECTS:  # one batch subject, named: every event sent on it
            twins[pattern] = True
            continue
        touched = {
            family: common
            for family, subjects in FAMILY_PATTERNS.items()
            if (common := overlap(pattern, subjects)) is not None
        }
        if not BATCHED_FAMILIES.intersection(touched):
            filters.append(pattern)
            continue
        for family, common in touched.items():
            if family in named:
                continue  # its named batch subject stands for it
            if family in BATCHED_FAMILIES:
                whole = covers(pattern, FAMILY_PATTERNS[family])
                for twin in batch_subjects_of(family):
                    twins[twin] = twins.get(twin, False) or whole
            else:
                filters.append(common)
    return server_filters([*filters, *twins]), twins
