"""bench/throughput.py's creation times: one per batch, read after the batch is built, so the
generator's own pauses while building are not counted as the chain's submit-to-admit."""

from __future__ import annotations

import msgspec
import pytest

from bench import throughput
from bench.objects import SimulatedJobs, simulated_job
from shared.workloads import workload_key

# (first, count, queues, why)
BATCHES = [
    (0, 1, 3, "one object"),
    (7, 5, 3, "five objects from the 8th, round robin over three namespaces"),
    (100, 40, 100, "a 10 ms batch at 4,000/s"),
]


class _Counted(SimulatedJobs):
    """A queue's Jobs that note each Job built, in the order built."""

    built: list[str] = []

    def encode(self, name: str, uid: str, created: str) -> bytes:
        self.built.append(name)
        return super().encode(name, uid, created)


@pytest.mark.parametrize(
    ("first", "count", "queues", "reason"), BATCHES, ids=[b[3] for b in BATCHES]
)
def test_a_batch_shares_one_creation_time_read_after_its_last_object_is_built(
    first: int, count: int, queues: int, reason: str
) -> None:
    built: list[str] = []
    jobs = [_Counted(f"tp-{q}", 5) for q in range(queues)]
    for shape in jobs:
        shape.built = built

    readings: list[int] = []

    def clock() -> float:
        readings.append(len(built))  # how many objects were built when it was read
        return 1000.0 + len(readings)

    stamps, updates = throughput.created_batch(first, count, jobs, clock=clock)

    assert readings == [count], f"{reason}: read once, after all were built"
    assert set(stamps.values()) == {1001.0}, reason
    assert len(stamps) == len(updates) == count, reason
    names = [f"tp-{n}" for n in range(first, first + count)]
    assert built == names, reason
    numbers = range(first, first + count)
    for (key, value, last), name, number in zip(updates, names, numbers, strict=True):
        obj = msgspec.json.decode(value)
        namespace = f"tp-{number % queues}"
        assert key == workload_key(namespace, name), reason
        assert obj["metadata"]["namespace"] == namespace and last == 0, reason
        assert obj["metadata"]["uid"] in stamps, reason
        uid = obj["metadata"]["uid"]
        expected = simulated_job(name, namespace, 5, uid=uid)
        expected["metadata"]["creationTimestamp"] = obj["metadata"]["creationTimestamp"]
        assert value == msgspec.json.encode(expected), f"{reason}: simulated_job's bytes"


# (created uids, admitted uids, all admitted?, why)
WAITS = [
    ({"a", "b"}, set(), False, "none admitted yet"),
    ({"a", "b"}, {"a"}, False, "one of two"),
    ({"a", "b"}, {"a", "b"}, True, "both"),
    ({"a", "b"}, {"a", "x"}, False, "as many admitted, but one is not a created workload"),
    ({"a", "b"}, {"a", "b", "x"}, True, "every created one, and another"),
    (set(), set(), True, "nothing created"),
]


@pytest.mark.parametrize(
    ("created", "admitted", "expected", "reason"), WAITS, ids=[w[3] for w in WAITS]
)
def test_the_wait_ends_when_every_created_workload_was_admitted(
    created: set[str], admitted: set[str], expected: bool, reason: str
) -> None:
    assert (
        throughput.all_admitted(dict.fromkeys(created, 1.0), dict.fromkeys(admitted, 2.0))
        is expected
    ), reason
