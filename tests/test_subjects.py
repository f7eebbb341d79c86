"""Client-side subject filters match as nats-server's wildcards do."""

import pytest

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
