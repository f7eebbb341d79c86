"""services/admission/queues.py ClusterQueueQueue.head: the head last found is handed back
without looking it up only while it still is the head; every change that makes another
record the head is seen (each case against a queue that looks the head up every time)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.admission.model import QueuedWorkload
from services.admission.queues import ClusterQueueQueue, Record, order_key
from shared.events import WorkloadRef


def _record(records: dict[str, Record], name: str, priority: int) -> Record:
    record = Record(QueuedWorkload(WorkloadRef("ns", name, name), "lq", [], float(priority)))
    record.key = order_key(priority, 0.0, name)
    records[name] = record
    return record


def _looked_up(queue: ClusterQueueQueue) -> Record | None:
    """The head found from the heap alone (no remembered head)."""
    for key in sorted(queue.heap):
        record = queue.records.get(key[4])
        if record is not None and record.key is key and not record.parked:
            return record
    return None


def _requeued(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    first = records["a"]
    queue.remove(first)
    first.key = order_key(1, 0.0, "a")  # a new key, as a change of priority gives it
    queue.push(first)


def _deleted(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.remove(records["a"])
    del records["a"]


def _released(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.park(records["a"])
    queue.release_one(records["a"].shape)


def _parked_then_ahead(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.park(records["a"])
    queue.push(_record(records, "c", 7))


def _removed_then_ahead(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.remove(records["a"])
    queue.push(_record(records, "c", 7))


def _deleted_then_again(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    _deleted(queue, records)
    queue.push(_record(records, "a", 1))


# (why, the change after the head was found once, the head then)
CHANGES: list[tuple[str, Callable[[ClusterQueueQueue, dict[str, Record]], None], str]] = [
    ("nothing changed: the same head, not looked up", lambda q, r: None, "a"),
    ("the head is parked: the next one", lambda q, r: q.park(r["a"]), "b"),
    ("the head is removed (admitted, finished): the next one", lambda q, r: q.remove(r["a"]), "b"),
    ("the head is deleted from the records: the next one", _deleted, "b"),
    ("the head is queued again with a new key, now behind b: b", _requeued, "b"),
    (
        "a record ahead of the head is pushed: it is the head",
        lambda q, r: q.push(_record(r, "c", 7)),
        "c",
    ),
    (
        "the head was parked and is queued again (released): a fresh entry, still the head",
        _released,
        "a",
    ),
    (
        "the head is parked, then a record ahead is pushed: the top is not the head's stale"
        " entry, so it is not dropped unlooked",
        _parked_then_ahead,
        "c",
    ),
    (
        "the head is removed, then a record ahead is pushed: that one",
        _removed_then_ahead,
        "c",
    ),
    (
        "the head is removed and a new record of its uid queued behind b: the old entry is"
        " dropped, the new one stands after b",
        _deleted_then_again,
        "b",
    ),
]


@pytest.mark.parametrize(("why", "change", "head"), CHANGES, ids=[c[0] for c in CHANGES])
def test_the_head_found_stands_only_while_it_is_the_head(
    why: str, change: Callable[[ClusterQueueQueue, dict[str, Record]], None], head: str
) -> None:
    records: dict[str, Record] = {}
    queue = ClusterQueueQueue(False, records)
    queue.push(_record(records, "a", 5))
    queue.push(_record(records, "b", 3))
    assert queue.head() is records["a"]
    change(queue, records)
    found = queue.head()
    assert found is _looked_up(queue), why
    assert found is not None and found.wl.ref.name == head, why
