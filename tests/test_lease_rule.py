"""The lease (shared/lease.py): the rule of when a lease may be taken, with a clock of our
own, and the replica ids."""

from __future__ import annotations

import pytest

from shared.lease import Lease, LeaseRecord, replica_id_from_env
from tests.lease_setup import FAST


def _held_by(holder: str) -> LeaseRecord:
    return LeaseRecord(holder, 1, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")


# (reason, looks: (record, revision, clock) in order, whether the last look may take it)
RULE_CASES: list[tuple[str, list[tuple[LeaseRecord | None, int, float]], bool]] = [
    ("a released lease is taken at once", [(_held_by(""), 5, 0.0)], True),
    ("our own id (restarted under it) takes it at once", [(_held_by("me"), 5, 0.0)], True),
    ("a first look at another's lease never takes it", [(_held_by("a"), 5, 100.0)], False),
    (
        "unchanged for less than a duration on our clock: still held",
        [(_held_by("a"), 5, 10.0), (_held_by("a"), 5, 10.5)],
        False,
    ),
    (
        "unchanged for a whole duration on our clock: lapsed",
        [(_held_by("a"), 5, 10.0), (_held_by("a"), 5, 10.75)],
        True,
    ),
    (
        "a renewal (new revision) restarts the count from when we saw it",
        [(_held_by("a"), 5, 10.0), (_held_by("a"), 6, 10.5), (_held_by("a"), 6, 10.9)],
        False,
    ),
    (
        "an unreadable record lapses by the same rule",
        [(None, 5, 10.0), (None, 5, 10.7)],
        True,
    ),
]


@pytest.mark.parametrize(("reason", "looks", "takes"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_when_a_lease_may_be_taken(
    reason: str, looks: list[tuple[LeaseRecord | None, int, float]], takes: bool
) -> None:
    """The lapse rule counts on the observer's own clock, never on the record's times."""
    lease = Lease(None, role="admission", replica="me", settings=FAST)  # type: ignore[arg-type]
    verdicts = [lease.may_take(record, revision, clock) for record, revision, clock in looks]
    assert verdicts[-1] is takes, reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("Admission-0", "uppercase"),
        ("admission_0", "underscore"),
        ("-admission", "leading dash"),
        ("a" * 64, "longer than 63"),
        ("admission.0", "a dot (it would split the membership key)"),
    ],
)
def test_a_replica_id_must_be_a_dns_label(value: str, reason: str) -> None:
    """BERTH_REPLICA_ID is refused unless it is a DNS-1123 label."""
    with pytest.raises(ValueError, match="DNS-1123"):
        replica_id_from_env("admission", {"BERTH_REPLICA_ID": value})


def test_the_default_replica_id_is_role_host_pid() -> None:
    """Without BERTH_REPLICA_ID: ``<role>-<hostname>-<pid>``, itself a valid label."""
    replica = replica_id_from_env("admission", {})
    assert replica.startswith("admission-") and len(replica) <= 63
    assert replica_id_from_env("admission", {"BERTH_REPLICA_ID": replica}) == replica
