"""Scheduler._owner: the queue of an entry popped from a pass's heaps is the one noted when
that very key object was pushed (the note taken off), else its record's queue."""

from __future__ import annotations

import pytest

from services.admission.queues import ClusterQueueQueue
from services.admission.scheduler import Scheduler
from shared.config import parse_object
from tests.scheduler_world import cq, flavor, group, lq, wl

# (reason, note the popped key? (None: no note; else which queue the note names), pops,
#  the queue each pop is told)
CASES: list[tuple[str, str | None, int, list[str]]] = [
    ("noted at its push: the note's queue, without the record's lookup", "q1", 1, ["q1"]),
    (
        "a key pushed twice (Presumed.undo): the first pop takes the note, the second"
        " finds none and reads its record's queue",
        "q1",
        2,
        ["q1", "q0"],
    ),
    ("no note (an equal key is another object): its record's queue", None, 1, ["q0"]),
]


@pytest.mark.parametrize(("reason", "noted", "pops", "told"), CASES, ids=[c[0] for c in CASES])
def test_the_popped_entrys_queue(
    reason: str, noted: str | None, pops: int, told: list[str]
) -> None:
    scheduler = Scheduler()
    scheduler.set_config(
        parse_object(document)
        for document in [
            flavor("a"),
            cq("q0", group(["cpu"], ("a", {"cpu": 4}))),
            cq("q1", group(["cpu"], ("a", {"cpu": 4}))),
            lq("lq", "q0"),
        ]
    )
    scheduler.submit(wl("w", "lq", t=1, cpu=1))
    record = scheduler._records["uid-w"]
    assert record.cq == "q0" and record.key is not None  # else the case proves nothing
    # The note names q1, not the record's q0: which one is told shows whether it was read.
    owner: dict[int, ClusterQueueQueue] = {}
    key = record.key if noted is not None else tuple(list(record.key))
    assert key == record.key and (key is record.key) is (noted is not None)
    if noted is not None:
        owner[id(record.key)] = scheduler._queues[noted]
    names = [scheduler._owner(owner, key).name for _ in range(pops)]
    assert names == told, reason
    assert not owner, reason  # the note is taken off with its pop
