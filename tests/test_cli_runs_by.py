"""The starvation bound in `berth get`: RUNS BY (berth_cli/get.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from berth_cli.get import pending_rows, runs_by, workload_rows

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("item", "shown", "why"),
    [
        ({"runsBy": "2026-11-24T12:04:00Z", "runsByReason": "reserved..."}, "in 4m", "bounded"),
        ({"runsBy": None, "runsByReason": "it needs more cpu than..."}, "-", "no bound: a dash"),
        ({"runsBy": "2026-11-24T11:59:30Z", "runsByReason": "r"}, "30s late", "a missed bound"),
        ({}, "", "not pending: nothing"),
    ],
)
def test_runs_by_cell(item: dict[str, Any], shown: str, why: str) -> None:
    """The cell says how far the bound is, a dash without one, nothing when not pending."""
    assert runs_by(item, now=NOW) == shown, why


def test_columns() -> None:
    """`get workloads -o wide` and `get pending` carry RUNS BY (before REASON in pending)."""
    workload = {
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"queueName": "q"},
        "status": {"berth": {"runsBy": None, "runsByReason": "ClusterQueue cq is inactive"}},
    }
    headers, rows = workload_rows([workload], wide=True, all_namespaces=False)
    assert "RUNS BY" in headers and rows[0][headers.index("RUNS BY")] == "-"
    pending = {"name": "w", "namespace": "default", "runsBy": None, "runsByReason": "x"}
    headers, rows = pending_rows([pending])
    assert headers[-2:] == ["RUNS BY", "REASON"] and rows[0][-2] == "-"
