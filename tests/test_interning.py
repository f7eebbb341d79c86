"""services/admission/interning.py: equal values are kept once, different ones apart, and the
kept event still says everything the displays and the fold read of it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
import pytest

from services.admission import interning
from services.admission.interning import Interner
from shared.events import PodSet, WorkloadRef, WorkloadSubmitted

DECODE = msgspec.json.Decoder(WorkloadSubmitted)
ENCODE = msgspec.json.Encoder()


def wire(uid: str, **fields: object) -> WorkloadSubmitted:
    """An event as the bus hands it over: freshly decoded, nothing shared with another."""
    values: dict[str, object] = {
        "source": "watcher",
        "workload": WorkloadRef("team-a", f"job-{uid}", uid),
        "kind": "Job",
        "queue_name": "lq",
        "pod_sets": [PodSet("main", 2, {"cpu": 1000})],
        "created": datetime(2026, 1, 1, tzinfo=UTC),
        "labels": {"app": "x"},
    } | fields
    return DECODE.decode(ENCODE.encode(WorkloadSubmitted(**values)))  # type: ignore[arg-type]


Part = Callable[[WorkloadSubmitted], object]
SHARED: list[tuple[str, dict[str, object], dict[str, object], Part, bool]] = [
    ("same pod sets: one list", {}, {}, lambda e: e.pod_sets, True),
    ("same labels: one dict", {}, {}, lambda e: e.labels, True),
    ("no annotations: one empty dict", {}, {}, lambda e: e.annotations, True),
    ("same namespace: one string", {}, {}, lambda e: e.workload.namespace, True),
    ("same queue name: one string", {}, {}, lambda e: e.queue_name, True),
    (
        "same large priority: one int",
        {"priority": 1000},
        {"priority": 1000},
        lambda e: e.priority,
        True,
    ),
    (
        "another priority: another int",
        {"priority": 1000},
        {"priority": 2000},
        lambda e: e.priority,
        False,
    ),
    (
        "another count: another list",
        {},
        {"pod_sets": [PodSet("main", 3, {"cpu": 1000})]},
        lambda e: e.pod_sets,
        False,
    ),
    (
        "a minimum count is part of the pod sets",
        {},
        {"pod_sets": [PodSet("main", 2, {"cpu": 1000}, min_count=1)]},
        lambda e: e.pod_sets,
        False,
    ),
    ("another label value: another dict", {}, {"labels": {"app": "y"}}, lambda e: e.labels, False),
]


@pytest.mark.parametrize(
    ("reason", "first", "second", "part", "same"), SHARED, ids=[c[0] for c in SHARED]
)
def test_equal_values_are_kept_once(
    reason: str, first: dict[str, object], second: dict[str, object], part: Part, same: bool
) -> None:
    interner = Interner()
    a = interner.submitted(wire("u1", **first))
    b = interner.submitted(wire("u2", **second))
    assert (part(a) is part(b)) is same, reason
    assert (part(a) == part(b)) is same, reason


def test_the_kept_event_says_what_the_displays_read() -> None:
    """Everything but the event's own id, time and source (read by the fold, before)."""
    event = wire("u1", priority_class="high", priority=5, annotations={"k": "v"})
    kept = Interner().submitted(event)
    dropped = {"id", "time", "source"}
    for name in WorkloadSubmitted.__struct_fields__:
        if name not in dropped:
            assert getattr(kept, name) == getattr(event, name), name
    assert kept.time == event.created


def test_a_full_table_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values unique to one workload must not pile up: two turns past the limit the table
    forgets (what was shared stays as it is)."""
    monkeypatch.setattr(interning, "TABLE_LIMIT", 2)
    interner = Interner()
    first = interner.strings({"job": "1"})
    for job in "2345":  # full at 2: older at 3, forgotten at 5
        interner.strings({"job": job})
    again = interner.strings({"job": "1"})
    assert again == first and again is not first
    assert interner.strings({"job": "5"}) is interner.strings({"job": "5"})


# (reason, keys asked in order with the table limit 3, how many values were made)
GENERATIONS: list[tuple[str, list[int], int]] = [
    ("a working set as large as the table, asked again and again: made once", [1, 2, 3] * 4, 3),
    ("one more than the table, in rounds: made once each", [1, 2, 3, 4] * 4, 4),
    ("asked no more for two turns: forgotten, made anew", [1, 2, 3, 4, 5, 6, 7, 8, 9, 1], 10),
]


@pytest.mark.parametrize(("reason", "keys", "made"), GENERATIONS, ids=[c[0] for c in GENERATIONS])
def test_two_generations_keep_a_working_set(
    monkeypatch: pytest.MonkeyPatch, reason: str, keys: list[int], made: int
) -> None:
    """A plain kept-once table forgets everything when it fills: a set of values one per
    LocalQueue, as many as the table holds, was made anew every time."""
    monkeypatch.setattr(interning, "TABLE_LIMIT", 3)
    table: interning.Generations[int, list[int]] = interning.Generations()
    count = 0

    def make(key: int) -> list[int]:
        nonlocal count
        count += 1
        return [key]

    for key in keys:
        assert table.kept(key, lambda k=key: make(k)) == [key], reason  # type: ignore[misc]
    assert count == made, reason
