"""The per-workload view for readers (``berth events``, ``berth describe``, the console): the
events on some per-workload subjects, read from the stored copies where the deployment keeps
them, else derived from the batches (docs/events.md, "The per-workload view").

Why both: a copy costs its publisher and nats-server a stored message per event, so a
deployment may keep only some (``BERTH_BUS_COPIES``); the batches hold every event either way.
Where every subject a reader asks for has its copies, the server filters them by subject and
sends only those; elsewhere the reader is sent the batches of the families it asks for and
keeps what matches. The services record which copies they keep in the stream's metadata
(:data:`COPIES_METADATA`), so a reader anywhere (the CLI on a laptop) knows which way to read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg

from shared.bus.batches import is_batch, is_copy
from shared.bus.settings import ALL_COPIES
from shared.events import decode_event, subject_for
from shared.subjects import (
    BATCHED_FAMILIES,
    FAMILY_PATTERNS,
    batched_filters,
    covers,
    overlap,
    server_filters,
    subject_matcher,
)

__all__ = ["COPIES_METADATA", "ViewReading", "copies_in", "copies_metadata"]

# The event stream's metadata key that names the copies the services keep.
COPIES_METADATA = "berth.copies"

_raw_list: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])


def copies_metadata(copies: Sequence[str]) -> str:
    """``BusSettings.copies`` as the stream's metadata value: ``none`` or the patterns."""
    return ",".join(copies) if copies else "none"


def copies_in(metadata: Mapping[str, str] | None) -> tuple[str, ...]:
    """The copies a stream's services keep, from its metadata; a stream without the key was
    made by a Berth that kept every copy."""
    value = (metadata or {}).get(COPIES_METADATA)
    if value is None:
        return ALL_COPIES
    return () if value == "none" else tuple(value.split(","))


def _has_copies(pattern: str, copies: Sequence[str]) -> bool:
    """Whether every batched event ``pattern`` matches has a stored copy under ``copies``
    (a pattern on commands, checks or markers needs none: those are stored as they are)."""
    for family in BATCHED_FAMILIES:
        common = overlap(pattern, FAMILY_PATTERNS[family])
        if common is not None and not any(covers(copy, common) for copy in copies):
            return False
    return True


@dataclass(frozen=True)
class ViewReading:
    """How a reader reads ``patterns``: the server's filters and, per stored message, the
    JSON of each event it adds to the view (:meth:`payloads`)."""

    filters: list[str]
    from_copies: bool  # the copies (and the events stored one message each) are the view
    wanted: Callable[[str], bool]
    # batch subject -> whether every event of its family is asked for (else each is matched)
    whole: Mapping[str, bool]

    @classmethod
    def of(cls, patterns: Sequence[str], copies: Sequence[str]) -> ViewReading:
        """Read the copies if every pattern has them and none asks for a batched family
        whole, else the batches of the batched families the patterns touch (and the events
        stored one each before batches). Why a whole family from the batches: they are the
        record, whole whatever copies were kept when, and the copies would cost the same."""
        wanted = subject_matcher(patterns)
        batched, whole = batched_filters(patterns)
        if not any(whole.values()) and all(_has_copies(p, copies) for p in patterns):
            return cls(server_filters(patterns), True, wanted, {})
        return cls(server_filters([*patterns, *batched]), False, wanted, whole)

    def payloads(self, msg: Msg) -> list[bytes]:
        """The JSON of each event ``msg`` adds to the view, as its publisher encoded it.

        Read from the copies: a batch adds nothing (its copies are the view), any other
        message itself. Derived: a copy adds nothing (its batch holds it), a batch those of
        its events whose own subject is asked for, in order, any other message itself. An
        event in a batch that does not decode (a type from a newer Berth) has no subject to
        match: it is kept only where its whole family is asked for. Raises
        ``msgspec.DecodeError`` for a batch that is not a JSON array."""
        if is_batch(msg.subject):
            if self.from_copies:
                return []
            raws = [bytes(raw) for raw in _raw_list.decode(msg.data)]
            return (
                raws
                if self.whole.get(msg.subject, False)
                else [raw for raw in raws if self._asked_for(raw)]
            )
        if not self.from_copies and is_copy(msg):
            return []
        return [msg.data]

    def _asked_for(self, payload: bytes) -> bool:
        try:
            return self.wanted(subject_for(decode_event(payload)))
        except msgspec.DecodeError:
            return False
