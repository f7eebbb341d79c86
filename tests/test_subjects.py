"""Client-side subject filters match as nats-server's wildcards do."""

from types import SimpleNamespace
from typing import cast

import pytest

from services.recovery.service import RecoveryService
from shared.events import _SUBJECTS, STATE_SUBJECTS, WorkloadRef, WorkloadStarted, subject_for
from shared.jobs import Attempt, ManagedJob
from shared.service import Runtime
from shared.subjects import subject_matcher


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


def test_recovery_keeps_only_its_managed_jobs_subjects() -> None:
    """Recovery skips other workloads' events before decoding them: by the subject's last two
    tokens, which hold the namespace and name as subject tokens (dots become '_')."""
    service = RecoveryService(cast(Runtime, SimpleNamespace(bus=None)))
    job = ManagedJob(id=1, name="train", namespace="team.a", resources="1x[cpu:1]", submitted_at=0)
    job.attempts.append(Attempt(name="train-1.v2", uid="u1"))
    service._index(job)

    def started(namespace: str, name: str) -> str:
        return subject_for(
            WorkloadStarted(
                source="watcher", workload=WorkloadRef(namespace, name, "x"), generation=1
            )
        )

    assert service._about_a_managed_job(started("team.a", "train-1.v2"))
    assert not service._about_a_managed_job(started("team.a", "train-2"))
    assert not service._about_a_managed_job(started("team-b", "train-1.v2"))
    assert not service._about_a_managed_job("berth.cmd")


def test_state_subjects_carry_every_fact_but_started() -> None:
    """Admission and preemption fold STATE_SUBJECTS: a new workload fact must not be left out
    by accident (only WorkloadStarted is, as it changes no quota)."""
    wanted = subject_matcher(STATE_SUBJECTS)
    for event_type, (family, verb) in _SUBJECTS.items():
        if family == "wl":
            subject = f"berth.wl.{verb}.ns.name"
            assert wanted(subject) is (event_type is not WorkloadStarted), subject
