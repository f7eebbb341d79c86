"""`berth status`'s rows (berth_cli/status.py) from membership records, without a bus."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from berth_cli.status import nats_summary, status_rows
from shared.membership import Member

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


def member(role: str, replica: str, *, active: bool, beat: str = "11:59:59") -> Member:
    return Member(
        role=role,
        replica=replica,
        pid=100,
        host="node-1",
        http="http://10.0.0.1:8482",
        active=active,
        since="2026-11-24T11:55:00Z",
        term=3 if active else 0,
        health="ready",
        heartbeat=f"2026-11-24T{beat}.000Z",
    )


NATS = nats_summary({"server_name": "nats-0", "version": "2.15.1", "cluster": "berth"})


# (reason, record, the HEALTH column, the DETAIL column)
CASES = [
    (
        "a fresh heartbeat shows the replica's own health",
        member("admission", "a-0", active=True),
        "ready",
        "term 3, http://10.0.0.1:8482",
    ),
    (
        "a standby shows no term",
        member("admission", "a-1", active=False),
        "ready",
        "http://10.0.0.1:8482",
    ),
    (
        "a heartbeat older than 3 s is lost",
        member("admission", "a-0", active=True, beat="11:59:56"),
        "lost",
        "term 3, http://10.0.0.1:8482",
    ),
]


@pytest.mark.parametrize(("reason", "record", "health", "detail"), CASES, ids=[c[0] for c in CASES])
def test_a_replica_row(reason: str, record: Member, health: str, detail: str) -> None:
    """Each record is one row: role, replica, pid, yes/no, age of since, health, detail."""
    rows = status_rows([record], NATS, now=NOW)
    row = next(r for r in rows if r[0] == "admission")
    assert row[:5] == ["admission", record.replica, "100", "yes" if record.active else "no", "5m"]
    assert (row[5], row[6]) == (health, detail), reason


def test_nats_first_and_every_role_without_a_record_listed_as_missing() -> None:
    """NATS leads the table (server, version, cluster); roles nobody runs are missing."""
    rows = status_rows([member("admission", "a-0", active=True)], NATS, now=NOW)
    assert rows[0] == [
        "nats",
        "nats-0",
        "",
        "",
        "",
        "connected",
        "v2.15.1, cluster berth",
    ]
    assert [r[0] for r in rows[1:]] == ["admission", "watcher", "preemption", "recovery"]
    assert [r[5] for r in rows[2:]] == ["missing"] * 3
