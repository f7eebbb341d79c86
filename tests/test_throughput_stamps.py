"""bench/throughput.py's creation times: one per batch, read after the batch is built, so the
generator's own pauses while building are not counted as the chain's submit-to-admit."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from bench import throughput
from shared.workloads import workload_key

# (first, count, queues, why)
BATCHES = [
    (0, 1, 3, "one object"),
    (7, 5, 3, "five objects from the 8th, round robin over three namespaces"),
    (100, 40, 100, "a 10 ms batch at 4,000/s"),
]


@pytest.mark.parametrize(
    ("first", "count", "queues", "reason"), BATCHES, ids=[b[3] for b in BATCHES]
)
def test_a_batch_shares_one_creation_time_read_after_its_last_object_is_built(
    first: int, count: int, queues: int, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    job = throughput.job

    def counted(name: str, namespace: str, runtime_ms: int) -> tuple[str, dict[str, Any]]:
        built.append(name)
        return job(name, namespace, runtime_ms)

    readings: list[int] = []

    def clock() -> float:
        readings.append(len(built))  # how many objects were built when it was read
        return 1000.0 + len(readings)

    monkeypatch.setattr(throughput, "job", counted)
    stamps, updates = throughput.created_batch(first, count, queues, 5, clock=clock)

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
