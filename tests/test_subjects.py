"""Client-side subject filters match as nats-server's wildcards do."""

from types import SimpleNamespace
from typing import cast

import pytest

from services.admission import reading as admission
from services.preemption import service as preemption
from services.recovery.service import RecoveryService, subjects_for
from shared.bus.filters import consumer_filters, transition_filters
from shared.events import STATE_SUBJECTS, SUBJECT_PARTS, WorkloadRef, WorkloadStarted
from shared.jobs import Attempt, ManagedJob
from shared.service import Runtime
from shared.subjects import (
    covers,
    pending_reports_of,
    record_subject,
    server_filters,
    subject_family,
    subject_matcher,
)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("berth.wl.>", "berth.wl.started.ns.job", True),
        ("berth.wl.>", "berth.wl", False),  # '>' needs at least one token
        ("berth.cq.*.admitted.>", "berth.cq.team-a.admitted.ns.job", True),
        ("berth.cq.*.admitted.>", "berth.cq.team-a.pending.ns.job", False),
        ("berth.cq.*.admitted.>", "berth.cq.admitted.ns.job", False),
        ("berth.job.status.*", "berth.job.status.7", True),
        ("berth.job.status.*", "berth.job.status.7.x", False),
        ("berth.cmd.create", "berth.cmd.create", True),
        ("berth.cmd.create", "berth.cmd.created", False),
    ],
)
def test_wildcards(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matcher([pattern])(subject) is expected


def test_any_pattern_matches() -> None:
    wanted = subject_matcher(["berth.cq.*.admitted.>", "berth.cmd.>"])
    assert wanted("berth.cmd.delete.ns.job")
    assert not wanted("berth.wl.finished.ns.job")


def test_recovery_knows_its_managed_jobs_workloads() -> None:
    """Recovery reads every workload's start and moves along only its managed jobs: by the
    event's namespace and name, dots and all (no subject tokens involved)."""
    service = RecoveryService(cast(Runtime, SimpleNamespace(bus=None)))
    job = ManagedJob(id=1, name="train", namespace="team.a", resources="1x[cpu:1]", submitted_at=0)
    job.attempts.append(Attempt(name="train-1.v2", uid="u1"))
    service._index(job)

    def started(namespace: str, name: str) -> WorkloadStarted:
        return WorkloadStarted(
            source="watcher", workload=WorkloadRef(namespace, name, "x"), generation=1
        )

    assert service.job_of(started("team.a", "train-1.v2")) == 1
    assert service.job_of(started("team.a", "train-2")) is None
    assert service.job_of(started("team-b", "train-1.v2")) is None
    assert service.job_of(started("team_a", "train-1_v2")) is None  # tokens are not names


def test_state_subjects_carry_every_fact_but_started() -> None:
    """Admission and preemption fold STATE_SUBJECTS: a new workload fact must not be left out
    by accident (only WorkloadStarted is, as it changes no quota)."""
    wanted = subject_matcher(STATE_SUBJECTS)
    for event_type, (family, verb) in SUBJECT_PARTS.items():
        if family == "wl":
            subject = f"berth.wl.{verb}.ns.name"
            assert wanted(subject) is (event_type is not WorkloadStarted), subject


@pytest.mark.parametrize(
    ("wide", "narrow", "expected", "reason"),
    [
        ("berth.>", "berth.lease.>", True, "'>' covers any longer tail"),
        ("berth.cq.*.admitted.>", "berth.cq.a.admitted.>", True, "'*' covers one name"),
        ("berth.cq.a.admitted.>", "berth.cq.*.admitted.>", False, "a name covers no '*'"),
        ("berth.wl.*", "berth.wl.>", False, "'*' is one token, '>' may be several"),
        ("berth.wl.>", "berth.wl", False, "'>' needs at least one token"),
        ("berth.wl.started.>", "berth.wl.finished.>", False, "different verbs"),
        ("berth.job.status.*", "berth.job.status.7", True, "'*' matches the job id"),
    ],
)
def test_covers(wide: str, narrow: str, expected: bool, reason: str) -> None:
    assert covers(wide, narrow) is expected, reason


@pytest.mark.parametrize(
    ("patterns", "expected", "reason"),
    [
        (["berth.>", "berth.lease.>"], ["berth.>"], "everything covers the markers"),
        (["berth.wl.>", "berth.lease.>"], ["berth.wl.>", "berth.lease.>"], "disjoint: both"),
        (["berth.lease.>", "berth.lease.>"], ["berth.lease.>"], "a duplicate once"),
        (["berth.cq.*.admitted.>", "berth.cq.>"], ["berth.cq.>"], "the wider one stays"),
    ],
)
def test_server_filters_never_overlap(
    patterns: list[str], expected: list[str], reason: str
) -> None:
    """nats-server refuses a consumer whose filters overlap."""
    assert server_filters(patterns) == expected, reason


@pytest.mark.parametrize(
    ("subject", "family", "reason"),
    [
        ("berth.cq.team-a.admitted.ns.job", "cq.*.admitted", "the queue is a name"),
        ("berth.wl.started.ns.job", "wl.started", "the verb, not the workload"),
        ("berth.check.prov.ns.job", "check.*", "any check's answer"),
        ("berth.lease.admission", "lease.*", "any role's marker"),
        ("berth.job.status.7", "job.status", "not the job id"),
        ("berth.cmd", "berth.cmd", "too short to have names: as it is"),
    ],
)
def test_subject_family(subject: str, family: str, reason: str) -> None:
    assert subject_family(subject) == family, reason


def _folded_types(subjects: tuple[str, ...]) -> set[str]:
    """The event kinds (verbs, 'reserved' apart) whose subjects ``subjects`` carry."""
    wanted = subject_matcher(subjects)
    kinds = {
        verb or family: f"berth.{family}.q.{verb}.ns.name"
        if family == "cq"
        else f"berth.{family}.{verb or 'x'}.ns.name"
        for family, verb in SUBJECT_PARTS.values()
    }
    kinds["reserved"] = "berth.cq.q.reserved.ns.name"
    return {kind for kind, subject in kinds.items() if wanted(subject)}


# (batches on, the kinds its subjects leave out of the fold's, the batch subjects named
# besides them, why)
DECIDING: list[tuple[bool, set[str], list[str], str]] = [
    (
        True,
        {"admitted", "reserved"},
        ["berth.b.cq.pending.preemption"],
        "batches on: not its own decisions; of the pending reports' batches only preemption's"
        " (named: it stands for the family), the pattern kept for a stream from before batches",
    ),
    (
        False,
        {"admitted", "reserved"},
        [],
        "batches off: preemption's pending reports share their subjects with admission's",
    ),
]


@pytest.mark.parametrize(
    ("batching", "left_out", "besides", "why"), DECIDING, ids=[d[3] for d in DECIDING]
)
def test_admission_leader_is_not_sent_only_its_own_decisions(
    batching: bool, left_out: set[str], besides: list[str], why: str
) -> None:
    """The deciding leader is not sent what it folds when it publishes it (admissions,
    reservations, and with batches on its pending reports); everything else its fold reads it
    still is (preemption's evictions share their subjects with admission's)."""
    deciding = admission.deciding_subjects(batching)
    assert _folded_types(admission.FOLDED_SUBJECTS) - _folded_types(deciding) == left_out, why
    assert [s for s in deciding if s.startswith("berth.b.")] == besides, why
    sent = consumer_filters(deciding, batching=batching)
    assert "berth.b.cq.pending" not in sent, "never its own pending reports' batches"


# (source, batches on, the pending reports' subjects the server sends, why)
PENDING_OF: list[tuple[str, bool, list[str], str]] = [
    ("admission", True, ["berth.b.cq.pending"],
     "batches on: admission's batches only (preemption and recovery read no other)"),
    ("preemption", True, ["berth.b.cq.pending.preemption"],
     "batches on: preemption's only (admission's deciding leader)"),
    ("admission", False, ["berth.cq.*.pending.>"],
     "batches off: both share the per-workload subjects, the reader tells them by source"),
    ("preemption", False, ["berth.cq.*.pending.>"], "batches off: the same for preemption's"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("source", "batching", "sent", "why"), PENDING_OF, ids=[p[3] for p in PENDING_OF]
)
def test_pending_reports_of_one_publisher(
    source: str, batching: bool, sent: list[str], why: str
) -> None:
    """The server sends only one publisher's pending reports; every subject given is kept, so
    a stream written before batches is still read whole (``transition_filters``)."""
    subjects = ("berth.wl.submitted.>", "berth.cq.*.pending.>")
    narrowed = pending_reports_of(source, subjects, batching=batching)
    assert narrowed[:2] == subjects, why
    filters = consumer_filters(narrowed, batching=batching)
    assert [f for f in filters if "pending" in f] == sent, why
    assert "berth.cq.*.pending.>" in transition_filters(narrowed), why


# (reader, its subjects with batches on, why)
ADMISSIONS_PENDING_ONLY: list[tuple[str, list[str], str]] = [
    ("preemption", list(preemption.folded_subjects(True)),
     "its fold reads admission's reports alone (Cluster._pending)"),
    ("recovery", subjects_for([], batching=True),
     "a wait and a job read admission's alone (waiting._pending, lifecycle)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("reader", "subjects", "why"), ADMISSIONS_PENDING_ONLY, ids=[a[0] for a in ADMISSIONS_PENDING_ONLY]
)
def test_preemption_and_recovery_are_sent_admissions_pending_reports_only(
    reader: str, subjects: list[str], why: str
) -> None:
    filters = consumer_filters(subjects, batching=True)
    assert [f for f in filters if "pending" in f] == ["berth.b.cq.pending"], why


def test_preemption_is_sent_what_its_cluster_folds() -> None:
    """Cluster.apply folds these kinds; a reservation holds quota as an admission does."""
    assert _folded_types(preemption.FOLDED_SUBJECTS) == {
        "submitted",
        "finished",
        "evicted",
        "deleted",
        "admitted",
        "reserved",
        "evict",
        "pending",
        "boost",
    }


# (family, batches on, the subject its record is on, why)
RECORD_CASES = [
    ("cq.*.admitted", True, "berth.b.cq.admitted", "batches on: the family's batch subject"),
    ("cq.*.admitted", False, "berth.cq.*.admitted.>", "batches off: each event on its own"),
    ("wl.submitted", True, "berth.b.wl.submitted", "a fact's batches"),
    ("wl.finished", False, "berth.wl.finished.>", "a fact one message each"),
]


@pytest.mark.parametrize(
    ("family", "batching", "subject", "why"), RECORD_CASES, ids=[c[3] for c in RECORD_CASES]
)
def test_a_familys_record_subject(family: str, batching: bool, subject: str, why: str) -> None:
    assert record_subject(family, batching=batching) == subject, why
    assert subject_matcher([subject])(subject.replace("*", "cq").replace(">", "ns.name")), why
