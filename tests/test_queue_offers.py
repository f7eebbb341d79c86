"""services/admission/queues.py ClusterQueueQueue offers: the offered record a pass took and
parks back as it was leaves the offers standing (``_parked_back``); every other move of a
parked record makes them anew. Each case checks the offers kept against those found from the
parked groups again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from services.admission.model import QueuedWorkload
from services.admission.queues import ClusterQueueQueue, Record, order_key
from shared.events import PodSet, WorkloadRef

SMALL = [PodSet("main", 1, {"cpu": 1000})]
LARGE = [PodSet("main", 1, {"cpu": 4000})]


def _record(records: dict[str, Record], name: str, time: float, pod_sets: list[PodSet]) -> Record:
    record = Record(QueuedWorkload(WorkloadRef("ns", name, name), "lq", pod_sets, time))
    record.key = order_key(0, time, name)
    records[name] = record
    return record


def _parked_queue() -> tuple[ClusterQueueQueue, dict[str, Record]]:
    """s1, s2 (small) and l1, l2 (large) parked; offered: s1 and l1."""
    records: dict[str, Record] = {}
    queue = ClusterQueueQueue(False, records)
    for name, time, pod_sets in (("s1", 1, SMALL), ("l1", 2, LARGE), ("s2", 3, SMALL)):
        record = _record(records, name, time, pod_sets)
        queue.push(record)
        queue.park(record)
    record = _record(records, "l2", 4, LARGE)
    queue.push(record)
    queue.park(record)
    queue.offer_parked()  # the pass of the case: s1 is the candidate
    return queue, records


def _take(queue: ClusterQueueQueue) -> Record:
    record = queue.candidate()
    assert record is not None and record.parked
    queue.take_offered(record)
    return record


def _back(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.park(_take(queue))


def _back_after_another_parked(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    taken = _take(queue)
    other = _record(records, "s0", 0.5, SMALL)  # ahead of s1 in its shape
    queue.push(other)
    queue.park(other)
    queue.park(taken)


def _admitted(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.remove(_take(queue))


def _back_after_release(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    taken = _take(queue)
    queue.release_one(_large_shape(records))  # l1 moves to the queue (it was offered)
    queue.park(taken)


def _back_with_new_key(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    taken = _take(queue)
    queue.remove(taken)
    taken.key = order_key(5, 1.0, "s1")  # requeued with another priority
    queue.push(taken)
    queue.park(taken)


def _back_then_second(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    queue.park(_take(queue))
    queue.park(_take(queue))  # l1 too: each comes back as it was


def _not_back(queue: ClusterQueueQueue, records: dict[str, Record]) -> None:
    _take(queue)
    queue.release_offered()  # l1, still offered, moves too


def _large_shape(records: dict[str, Record]) -> bytes:
    return records["l1"].shape


@dataclass
class Case:
    reason: str
    step: Callable[[ClusterQueueQueue, dict[str, Record]], None]
    kept: bool  # the offers stand after the step


CASES = [
    Case("the offered s1 taken and parked back as it was: the offers stand", _back, True),
    Case("two offered taken and parked back in turn: the offers stand", _back_then_second, True),
    Case(
        "another record parked (ahead of s1 in its shape) before s1 comes back: made anew",
        _back_after_another_parked,
        False,
    ),
    Case("s1 taken and admitted: made anew", _admitted, False),
    Case(
        "a parked record released (the next of the large shape) before s1 comes back: anew",
        _back_after_release,
        False,
    ),
    Case("s1 comes back with another key (requeued): made anew", _back_with_new_key, False),
    Case("s1 taken and moved to the queue at the pass's end: made anew", _not_back, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason[:60])
def test_offers_after_a_take(case: Case) -> None:
    queue, records = _parked_queue()
    before = queue.offers
    assert before is not None
    case.step(queue, records)
    kept = queue.offers
    assert (kept is not None) == case.kept, case.reason
    while queue.offered:  # the rest left parked, as a pass leaves them
        queue.skip_offered()
    found = queue._first_parked()  # the offers made from the parked groups
    if kept is not None:
        assert kept is not before, case.reason  # a new list: settled.py's quiet knows lists
        assert kept == found, case.reason
    queue.offer_parked()
    assert queue.offered == found, case.reason
