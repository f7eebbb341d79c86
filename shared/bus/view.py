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
from dataclasses import dataclass, field
from datetime import datetime

from nats.aio.msg import Msg

from shared.bus.batches import RecentIds, Shown, is_batch, is_copy, shown_events
from shared.bus.settings import ALL_COPIES
from shared.events import subject_for
from shared.subjects import (
    BATCHED_FAMILIES,
    FAMILY_PATTERNS,
    batched_filters,
    covers,
    overlap,
    server_filters,
    subject_matcher,
)

__all__ = [
    "COPIES_METADATA",
    "SINCE_METADATA",
    "StoredCopies",
    "ViewReading",
    "copies_in",
    "copies_metadata",
    "stream_metadata",
]

# The event stream's metadata: ``berth.copies.<service>``, the copies each service keeps
# (:func:`copies_metadata`), and ``berth.copies.since``, when any of them last changed.
COPIES_METADATA = "berth.copies"
SINCE_METADATA = f"{COPIES_METADATA}.since"


def copies_metadata(copies: Sequence[str]) -> str:
    """``BusSettings.copies`` as the stream's metadata value: ``none`` or the patterns."""
    return ",".join(copies) if copies else "none"


def _copies_of(value: str) -> tuple[str, ...]:
    return () if value == "none" else tuple(value.split(","))


@dataclass(frozen=True)
class StoredCopies:
    """The copies every service keeps, and since when (None: since the stream began)."""

    copies: tuple[str, ...]
    since: datetime | None = None


def copies_in(metadata: Mapping[str, str] | None) -> StoredCopies:
    """What a reader may count on finding as copies, from the stream's metadata.

    The rule: the services' settings if they all agree; none if they differ (a reader then
    derives everything from the batches, which hold every event whoever published it); every
    copy if no service recorded one (a Berth from before the setting kept them all). The copies
    are complete only from ``since``, the last time a service's setting changed."""
    metadata = metadata or {}
    prefix = f"{COPIES_METADATA}."
    values = {v for k, v in metadata.items() if k.startswith(prefix) and k != SINCE_METADATA}
    if not values:
        copies: tuple[str, ...] = ALL_COPIES
    elif len(values) == 1:
        copies = _copies_of(values.pop())
    else:
        copies = ()
    since = metadata.get(SINCE_METADATA)
    return StoredCopies(copies, datetime.fromisoformat(since) if since else None)


def stream_metadata(
    existing: Mapping[str, str] | None, source: str, copies: Sequence[str], now: datetime
) -> dict[str, str]:
    """The stream's metadata once service ``source``, keeping ``copies``, has started: what
    was there (other services' settings, an operator's own keys), its own setting under
    ``berth.copies.<source>``, and ``berth.copies.since`` moved to ``now`` if its setting is
    not what it was (no setting recorded counts as every copy, as :func:`copies_in` reads
    it), since copies stored before then do not match the new setting."""
    metadata = dict(existing or {})
    key = f"{COPIES_METADATA}.{source}"
    value = copies_metadata(copies)
    if _copies_of(metadata.get(key, copies_metadata(ALL_COPIES))) != _copies_of(value):
        metadata[SINCE_METADATA] = now.isoformat()
    metadata[key] = value
    return metadata


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
    """How a reader reads ``patterns``: the server's filters and, per stored message, each
    event it adds to the view (:meth:`events`)."""

    filters: list[str]
    from_copies: bool  # the copies (and the events stored one message each) are the view
    wanted: Callable[[str], bool]
    # batch subject -> whether every event of its family is asked for (else each is matched)
    whole: Mapping[str, bool]
    # the ids of the events shown lately: a fact reported again is shown once (events)
    shown: RecentIds = field(default_factory=RecentIds, compare=False, repr=False)

    @classmethod
    def of(
        cls, patterns: Sequence[str], stored: StoredCopies, start: datetime | None = None
    ) -> ViewReading:
        """Read the copies if every pattern has them from the read's ``start`` on (None: the
        stream's first event) and none asks for a batched family whole, else the batches of
        the batched families the patterns touch (and the events stored one each before
        batches). Why a whole family from the batches: they are the record, whole whatever
        copies were kept when, and the copies would cost the same."""
        wanted = subject_matcher(patterns)
        batched, whole = batched_filters(patterns)
        complete = stored.since is None or (start is not None and start >= stored.since)
        copies = stored.copies
        if complete and not any(whole.values()) and all(_has_copies(p, copies) for p in patterns):
            return cls(server_filters(patterns), True, wanted, {})
        return cls(server_filters([*patterns, *batched]), False, wanted, whole)

    def events(self, msg: Msg) -> list[Shown]:
        """Each event ``msg`` adds to the view (:meth:`_added`) that it has not shown
        lately: a fact reported again, stored again as a copy (copies carry no
        ``Nats-Msg-Id``) or in a batch of other contents, is shown once. An event that
        does not decode has no id to tell: it is shown."""
        added = self._added(msg)
        first = self.shown.first
        return [item for item in added if item.event is None or first(item.event.id)]

    def _added(self, msg: Msg) -> list[Shown]:
        """Each event ``msg`` adds to the view, as its publisher encoded it and decoded
        (:func:`shared.bus.batches.shown_events`).

        Read from the copies: a batch adds nothing (its copies are the view), any other
        message its event. Derived: a copy adds nothing (its batch holds it), a batch those
        of its events whose own subject is asked for, in order, any other message its event.
        An event in a batch that does not decode (a type from a newer Berth) has no subject
        to match: it is kept only where its whole family is asked for. Raises
        ``msgspec.DecodeError`` for a batch that is not a JSON array."""
        if is_batch(msg.subject):
            if self.from_copies:
                return []
            shown = shown_events(msg)
            if self.whole.get(msg.subject, False):
                return shown
            return [
                item
                for item in shown
                if item.event is not None and self.wanted(subject_for(item.event))
            ]
        if not self.from_copies and is_copy(msg):
            return []
        return shown_events(msg)
