"""Header values the bus builds (shared/bus/headers.py): a value that needs no cleaning is
handed to nats-py as a ``HeaderValue``, whose strip and translate give exactly what ``str``'s
give; one that needs cleaning stays a plain ``str``; and on a real server the copies and
batches a bus publishes carry the same headers as before."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.watcher import reporting
from shared.bus import STREAM, Bus
from shared.bus.headers import HeaderValue, header_value
from shared.bus.settings import BusSettings
from shared.events import WorkloadRef
from tests.conftest import bus_auth

# The table nats-py cleans every header value with: CR and LF become spaces.
NEWLINES = str.maketrans({"\r": " ", "\n": " "})

# (value, made a HeaderValue, why)
VALUE_CASES: list[tuple[str, bool, str]] = [
    ("started-0f3b2c1e-aaaa-bbbb-cccc-123456789012-1-t3", True, "an event id, term stamped"),
    ("b-0123456789abcdef0123456789abcdef", True, "a batch's id"),
    ("42", True, "an expected sequence"),
    ("odd\nid", False, "a LF inside: nats-py must replace it (must not apply)"),
    ("odd\rid", False, "a CR inside: nats-py must replace it (must not apply)"),
    (" padded", False, "leading whitespace: nats-py must strip it (must not apply)"),
    ("padded\t", False, "trailing whitespace: nats-py must strip it (must not apply)"),
    ("", True, "empty: nothing to strip or replace"),
]

# (translate table, why): each must give what str's own translate gives
TABLES: list[tuple[Any, str]] = [
    (NEWLINES, "nats-py's: CR and LF only, none in the value"),
    ({ord("\r"): None}, "CR only"),
    (str.maketrans({"a": "A", "1": "!"}), "other characters: str's own translate (must not apply)"),
    ({}, "an empty table"),
    ("ABCDEFGHIJKLMNOPQRSTUVWXYZ" * 5, "a sequence, not a dict: str's own (must not apply)"),
]


@pytest.mark.parametrize("case", VALUE_CASES, ids=[case[2] for case in VALUE_CASES])
def test_a_header_value_is_cleaned_as_nats_py_would(case: tuple[str, bool, str]) -> None:
    value, clean, _ = case
    made = header_value(value)
    assert made == value
    assert isinstance(made, HeaderValue) is clean
    for table, why in TABLES:
        assert made.strip().translate(table) == value.strip().translate(table), why
    assert made.strip().translate(NEWLINES).encode() == value.strip().translate(NEWLINES).encode()
    assert made.strip("-0") == value.strip("-0"), "stripping other characters: str's own"


async def test_copies_are_marked_and_batches_carry_their_id(nats_url: str) -> None:
    """A round of two events, one with an id nats-py must clean: the copies are marked
    copies (no ``Nats-Msg-Id``: publishing.py ``publish_copies``), the batch carries its
    digest id."""
    bus = await Bus.connect(
        nats_url, source="watcher", auth=bus_auth(nats_url), settings=BusSettings(batching=True)
    )
    try:
        await bus.ensure_stream()
        ref = WorkloadRef("team", "job", "uid-1")
        clean = reporting.started(ref, 1)
        odd = msgspec.structs.replace(
            reporting.started(WorkloadRef("team", "other", "uid-2"), 1), id=" odd\nid"
        )
        await bus.publish_many([clean, odd])
        info = await bus.js.stream_info(STREAM)
        headers = [
            (await bus.js.get_msg(STREAM, seq)).headers or {}
            for seq in range(1, info.state.last_seq + 1)
        ]
        assert headers[:2] == [{"Berth-Copy": "1"}] * 2, "a copy carries no id header"
        [batch] = headers[2:]
        assert list(batch) == ["Nats-Msg-Id"] and batch["Nats-Msg-Id"].startswith("b-")
    finally:
        await bus.close()
