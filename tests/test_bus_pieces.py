"""``Bus.publish_pieces`` (shared/bus/publishing.py) against a real nats-server: events made
piece by piece go out as each piece is made, are stored once each in order, and a failure
while making them keeps what was already sent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.events import Event
from tests.test_bus_batches import _admitted, _connect, _pending, _replayed

# (reason, the pieces' workload names; a name starting with "p" is a pending report)
ORDERS: list[tuple[str, list[list[str]]]] = [
    ("one piece: as publish_many", [["a", "pb", "c"]]),
    (
        "several pieces: each event once, each piece after the one before",
        [["a", "pb"], ["c"], ["pd", "e", "f"]],
    ),
    ("an empty piece among them changes nothing", [["a"], [], ["b"]]),
]


def _event(name: str) -> Event:
    return _pending(name) if name.startswith("p") else _admitted(name)


@pytest.mark.parametrize(("reason", "names"), ORDERS, ids=[c[0] for c in ORDERS])
async def test_pieces_are_stored_once_each_in_order(
    nats_url: str, reason: str, names: list[list[str]]
) -> None:
    bus = await _connect(nats_url, "admission")
    try:
        await bus.publish_pieces([[_event(n) for n in piece] for piece in names])
        flat = [n for piece in names for n in piece]
        stored = [e.workload.name for e in await _replayed(bus, ["berth.>"], len(flat))]
        # A piece goes out as one batch per family: in order within a family, and each
        # piece's after the piece before.
        start = 0
        for piece in names:
            assert sorted(stored[start : start + len(piece)]) == sorted(piece), reason
            start += len(piece)
        for family in (lambda n: n.startswith("p"), lambda n: not n.startswith("p")):
            assert [n for n in stored if family(n)] == [n for n in flat if family(n)], reason
    finally:
        await bus.close()


async def test_each_piece_is_written_before_the_next_is_made(nats_url: str) -> None:
    """What makes the pieces is resumed only once the piece before is handed to the client
    and written out (nothing left in its buffer): a pass's first admissions are on their way
    while the rest are made."""
    bus = await _connect(nats_url, "admission")
    seen: list[tuple[int, int]] = []  # (messages handed to the client, bytes not yet written)

    def pieces() -> Iterator[list[Event]]:
        for name in ("a", "b", "c"):
            seen.append((bus.nc.stats["out_msgs"], bus.nc.pending_data_size))
            yield [_admitted(name)]

    try:
        await bus.publish_pieces(pieces())
        handed = [count for count, _ in seen]
        assert handed[0] < handed[1] < handed[2], seen
        assert [buffered for _, buffered in seen[1:]] == [0, 0], seen
    finally:
        await bus.close()


async def test_a_failure_while_making_pieces_keeps_what_was_sent(nats_url: str) -> None:
    """The error reaches the caller (the service stops; its restart rebuilds from the
    stream), and the pieces sent before it are stored: nothing is sent twice or half."""
    bus = await _connect(nats_url, "admission")

    def pieces() -> Iterator[list[Event]]:
        yield [_admitted("a"), _admitted("b")]
        raise RuntimeError("making the second piece failed")

    try:
        with pytest.raises(RuntimeError, match="second piece"):
            await bus.publish_pieces(pieces())
        events = await _replayed(bus, ["berth.>"], 2)
        assert [e.workload.name for e in events] == ["a", "b"]
    finally:
        await bus.close()
