"""Event ids drawn many at a time (shared/event_ids.py): each a version-4 UUID in hex, each
given once, and a forked child never given its parent's next ones."""

from __future__ import annotations

import os
import uuid

import pytest

from shared import event_ids
from shared.event_ids import new_event_id

# (random bytes of one id as the OS gave them, the id made of them, why)
FIXED_BITS_CASES = [
    (bytes(16), "00000000000040008000000000000000", "all zero: version and variant bits set"),
    (b"\xff" * 16, "ffffffffffff4fffbfffffffffffffff", "all one: the bits they replace cleared"),
    (bytes(range(16)), "000102030405460788090a0b0c0d0e0f", "only bytes 6 and 8 changed"),
]


@pytest.mark.parametrize(("raw", "expected", "why"), FIXED_BITS_CASES)
def test_a_drawn_id_is_its_random_bytes_with_the_fixed_bits(
    raw: bytes, expected: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: raw * (n // 16))
    drawn = event_ids._drawn_ids(3)
    assert drawn == [expected] * 3, why
    parsed = uuid.UUID(hex=expected)
    assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122), why


@pytest.mark.parametrize(
    ("taken", "why"),
    [
        (1, "within the first draw"),
        (event_ids._IDS_PER_DRAW, "exactly one draw"),
        (3 * event_ids._IDS_PER_DRAW + 5, "across draws: each draw's ids are new ones"),
    ],
)
def test_ids_are_given_once(taken: int, why: str) -> None:
    ids = [new_event_id() for _ in range(taken)]
    assert len(set(ids)) == taken, why
    assert all(uuid.UUID(hex=value).hex == value for value in ids), why


def test_a_forked_child_does_not_take_its_parents_next_ids() -> None:
    """The ids the parent has drawn are its own: a child given them would name events as
    the parent names its next ones (fails without the at-fork reset)."""
    new_event_id()  # the parent holds drawn ids now
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its next id, to the parent, then out at once
        os.write(write, new_event_id().encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    childs = os.read(read, 64).decode()
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    parents = [new_event_id() for _ in range(event_ids._IDS_PER_DRAW)]
    assert len(childs) == 32 and childs not in parents
