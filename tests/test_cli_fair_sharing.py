"""berth get clusterqueues -o wide and describe show Kueue's weightedShare."""

from __future__ import annotations

from typing import Any

import pytest

from berth_cli.describe import _weighted_share
from berth_cli.get import cluster_queue_rows


def _queue(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "cq"}, "spec": {"cohort": "all"}, "status": status}


ROWS = [
    (
        "fair sharing on: the share",
        {"fairSharing": {"weightedShare": 334}},
        334,
        ["  Weighted Share:       334"],
    ),
    (
        "a zero weight that borrows",
        {"fairSharing": {"weightedShare": 2**63 - 1}},
        2**63 - 1,
        [f"  Weighted Share:       {2**63 - 1}"],
    ),
    ("fair sharing off: a dash, and no line in describe", {}, "-", []),
]


@pytest.mark.parametrize(("why", "status", "column", "lines"), ROWS, ids=[r[0] for r in ROWS])
def test_weighted_share_column_and_line(
    why: str, status: dict[str, Any], column: object, lines: list[str]
) -> None:
    """The wide table ends with WEIGHTED SHARE; describe adds one line under Status."""
    headers, rows = cluster_queue_rows([_queue(status)], wide=True)
    assert headers[-1] == "WEIGHTED SHARE" and rows[0][-1] == column, why
    assert _weighted_share(status) == lines, why
    narrow, _ = cluster_queue_rows([_queue(status)], wide=False)
    assert "WEIGHTED SHARE" not in narrow
