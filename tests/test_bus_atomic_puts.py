"""Plain key puts as atomic batches (``Publishing.send_key_updates``, shared/bus/publishing.py):
which updates go that way (``goes_atomic``), and, on a real nats-server, that each put so sent
is stored with the revision its outcome names, that a bucket without atomic batches still takes
one acked put each, and that a refused batch stores nothing and asks for every put again."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from nats.js import api

from shared.bus import AckTimeout, Bus, KeyNotFound
from shared.bus.buckets import Bucket
from shared.bus.publishing import ATOMIC_BATCH, goes_atomic
from tests.conftest import bus_auth

Update = tuple[str, bytes, int | None]

# (the bucket takes atomic batches, the updates, they go as atomic batches, why)
GOES_ATOMIC_CASES: list[tuple[bool, list[Update], bool, str]] = [
    (True, [("a", b"1", None), ("b", b"2", None)], True, "two plain puts: one ack for both"),
    (True, [("a", b"1", None)], False, "one put: a batch would add headers for nothing"),
    (True, [], False, "nothing to send"),
    (
        True,
        [("a", b"1", None), ("b", b"2", 7)],
        False,
        "a compare-and-swap among them: its own outcome, a lost swap must not drop the others",
    ),
    (
        False,
        [("a", b"1", None), ("b", b"2", None)],
        False,
        "the bucket's stream takes no atomic batches (made before they were asked for)",
    ),
]


@pytest.mark.parametrize("case", GOES_ATOMIC_CASES, ids=[case[3] for case in GOES_ATOMIC_CASES])
def test_which_updates_go_as_atomic_batches(case: tuple[bool, list[Update], bool, str]) -> None:
    atomic, updates, expected, _ = case
    assert goes_atomic(atomic, updates) is expected


@dataclass(frozen=True)
class PutCase:
    why: str
    bucket: str
    puts: int
    made_atomic: bool  # its stream takes atomic batches
    told_atomic: bool  # what the Bucket handed out says
    stored: bool  # the values are stored, each at the revision its outcome names


PUT_CASES = [
    PutCase("a bucket made by the bus: one atomic batch", "made", 3, True, True, True),
    PutCase(
        "more puts than a batch holds: two batches, revisions still each put's own",
        "split",
        ATOMIC_BATCH + 2,
        True,
        True,
        True,
    ),
    PutCase(
        "a bucket made without atomic batches: one acked put each (must not batch)",
        "older",
        3,
        False,
        False,
        True,
    ),
    PutCase(
        "a batch the stream refuses (no atomic batches there): nothing stored, each put"
        " told to write again",
        "refused",
        3,
        False,
        True,
        False,
    ),
]


async def test_atomic_puts_per_case(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    try:
        for case in PUT_CASES:
            if case.made_atomic:
                kv = await bus.kv(case.bucket)
            else:  # as a bucket made before the bus asked for atomic batches
                await bus.js.create_key_value(
                    bucket=case.bucket, history=1, storage=api.StorageType.FILE
                )
                kv = await bus.kv(case.bucket)
            assert isinstance(kv, Bucket)
            assert kv.atomic is case.made_atomic, case.why
            kv.atomic = case.told_atomic
            updates: list[Update] = [
                (f"k{index}", f"v{index}".encode(), None) for index in range(case.puts)
            ]
            outcomes = await (await bus.send_key_updates(kv, updates)).outcomes()
            assert len(outcomes) == case.puts, case.why
            for (key, value, _), outcome in zip(updates, outcomes, strict=True):
                if case.stored:
                    assert isinstance(outcome, int), (case.why, outcome)
                    entry = await kv.get(key)
                    assert (entry.value, entry.revision) == (value, outcome), case.why
                else:
                    assert isinstance(outcome, AckTimeout), (case.why, outcome)
                    with pytest.raises(KeyNotFound):
                        await kv.get(key)
    finally:
        await bus.close()
