"""services/admission/books.py: what the statuses and metrics read of each queue's admitted
workloads, after admissions start and end."""

from __future__ import annotations

import pytest

from services.admission.books import QueueBooks

CPU = ("f", "cpu")
GPU = ("g", "gpu")
Step = tuple[str, tuple[str, str], dict[tuple[str, str], int], int]  # (cq, lq, usage, sign)

# (steps, ClusterQueue usage after, LocalQueue usage after, counts after (cq, lq), why)
CASES: list[tuple[list[Step], dict[str, object], dict[object, object], tuple[int, int], str]] = [
    (
        [("cq", ("ns", "lq"), {CPU: 1000}, 1)],
        {"cq": {CPU: 1000}},
        {("ns", "lq"): {CPU: 1000}},
        (1, 1),
        "a first admission: each queue's usage made",
    ),
    (
        [("cq", ("ns", "lq"), {CPU: 1000}, 1), ("cq", ("ns", "lq"), {CPU: 500, GPU: 1}, 1)],
        {"cq": {CPU: 1500, GPU: 1}},
        {("ns", "lq"): {CPU: 1500, GPU: 1}},
        (2, 2),
        "a second one adds to the same dicts, a new resource after",
    ),
    (
        [("cq", ("ns", "lq"), {CPU: 1000}, 1), ("cq", ("ns", "lq"), {CPU: 1000}, -1)],
        {"cq": {CPU: 0}},
        {("ns", "lq"): {CPU: 0}},
        (0, 0),
        "ended: 0 kept (the gauges show 0, not nothing)",
    ),
    (
        [("cq", ("ns", "a"), {CPU: 1000}, 1), ("cq", ("ns", "b"), {CPU: 2000}, 1)],
        {"cq": {CPU: 3000}},
        {("ns", "a"): {CPU: 1000}, ("ns", "b"): {CPU: 2000}},
        (2, 1),
        "two LocalQueues of one ClusterQueue: each its own, the ClusterQueue both",
    ),
]


@pytest.mark.parametrize(
    ("steps", "cq_usage", "lq_usage", "counts", "why"), CASES, ids=[c[4] for c in CASES]
)
def test_the_books(
    steps: list[Step],
    cq_usage: dict[str, object],
    lq_usage: dict[object, object],
    counts: tuple[int, int],
    why: str,
) -> None:
    books = QueueBooks()
    for cq, lq, usage, sign in steps:
        books.admitted(cq, lq, usage, sign)
    assert books.cq_usage == cq_usage, why
    assert books.lq_usage == lq_usage, why
    assert (books.cq_admitted["cq"], books.lq_admitted[steps[0][1]]) == counts, why
