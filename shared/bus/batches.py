"""Batches on the bus: the events a service publishes in one round, one message per subject
family (docs/events.md "Batches").

A batch is published on ``berth.b.<family>`` (``berth.b.cq.admitted``, ``berth.b.wl.started``:
:func:`shared.subjects.batch_subject`); its payload is the JSON array of its events, each
encoded once and keeping its own id and term; its ``Nats-Msg-Id`` is ``b-`` and a digest of its
events' ids, so a retried batch is stored once, and so is the same set of events published
again (a fact reported again, with a new time: the ids say it is the same fact, as the stream's
duplicate window judged single events by their ids), while a batch of other events never
passes for a copy of it. Why batches: a message costs its publisher, nats-server and every
consumer a fixed price (framing, an ack, a delivery, a Python callback), paid here once per
batch instead of once per event.

Just before a batch is sent, each of its events is also published on its per-workload subject
without awaiting an ack (``Publishing.publish_copies``): the view external tools follow.
Services read only the batches of batched families (:func:`shared.subjects.batched_filters`),
never those copies.
"""

from __future__ import annotations

import hashlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec
from nats.aio.msg import Msg

from shared.event_families import all_of_family, subject_family_of
from shared.events import (
    AnyEvent,
    Event,
    decode_event,
    encode_event,
    subject_for,
)
from shared.logging import get_logger
from shared.subjects import (
    BATCH_PREFIX,
    BATCH_SUBJECT_OF,
    BATCH_SUBJECTS,
    batched_filters,
    subject_matcher,
)

__all__ = [
    "COPY_HEADER",
    "MAX_BATCH_BYTES",
    "BatchView",
    "Prepared",
    "RecentIds",
    "Shown",
    "Wire",
    "batched",
    "expand",
    "is_batch",
    "is_copy",
    "record_events",
    "record_of",
    "shown_events",
]

log = get_logger("bus")

# The header that marks a per-workload copy of an event stored in a batch: a tool auditing
# the record reads the batches and skips these (:func:`record_of`).
COPY_HEADER = "Berth-Copy"
# Well under nats-server's default max_payload (1 MiB): a bigger round is split.
MAX_BATCH_BYTES = 256 * 1024

# How many event ids a consumer remembers to drop a repeat (:class:`RecentIds`): a retried
# round comes within seconds, far fewer events than this later.
RECENT_IDS = 100_000

# subject, payload, message id: one message as it goes on the wire.
Wire = tuple[str, bytes, str]

_list_decoder: msgspec.json.Decoder[list[AnyEvent]] = msgspec.json.Decoder(list[AnyEvent])
_raw_list_decoder: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])


class Prepared(NamedTuple):
    """One event ready to publish: its per-workload subject, encoded body, id (term stamped),
    the workload it is about (batches keep each workload's events in order) and its family.
    A tuple: one per event a service publishes, built in C, not by a frozen __init__."""

    subject: str
    payload: bytes
    msg_id: str
    workload: str
    family: str  # of its subject (shared.subjects.subject_family)

    @classmethod
    def of(cls, event: Event) -> Prepared:
        """``event`` as it is (its id and term already stamped) ready to publish."""
        [prepared] = cls.each((event,))
        return prepared

    @classmethod
    def each(cls, events: Iterable[Event]) -> list[Prepared]:
        """:meth:`of` of each of ``events``, in order, in one call: a round publishes many."""
        # tuple.__new__: the same tuple as cls(...), without the Python __new__ that
        # NamedTuple generates (one per event published)
        new, made = tuple.__new__, []
        for event in events:
            fields = (
                subject_for(event),
                encode_event(event),
                event.id,
                event.workload.key,
                subject_family_of(event),
            )
            made.append(new(cls, fields))
        return made


def is_batch(subject: str) -> bool:
    return subject.startswith(BATCH_PREFIX)


def is_copy(msg: Msg) -> bool:
    """Whether a message is the per-workload copy of an event stored in a batch."""
    return msg.headers is not None and COPY_HEADER in msg.headers


def batched(
    prepared: Sequence[Prepared], subject_of: Mapping[str, str] = BATCH_SUBJECT_OF
) -> tuple[list[Wire], list[Wire]]:
    """The messages that publish ``prepared`` (batches, and single messages for the families
    that are not batched), and the per-workload copies to publish just before them.
    ``subject_of``: batched family -> its batches' subject, for the publisher
    (``shared.subjects.publisher_batch_subjects``).

    The rule: an event joins the open batch of its family, unless that batch is full
    (:data:`MAX_BATCH_BYTES`) or its workload already has an event in a message after that
    batch; then it opens a new one. So the events about one workload stay in the order they
    were given (an eviction before the next admission), while a round of many workloads is
    one message per family."""
    groups: list[tuple[str | None, list[Prepared]]] = []  # batch subject (None: single), events
    sizes: list[int] = []  # of each group's payload
    open_batch: dict[str, int] = {}  # batch subject -> index in groups
    latest: dict[str, int] = {}  # workload -> index of the last group holding one of its events
    copies: list[Wire] = []
    batch_subject_of, last_of = subject_of.get, latest.get
    for event in prepared:
        on, payload, msg_id, workload, family = event
        subject = batch_subject_of(family)
        if subject is None:  # not a batched family
            latest[workload] = len(groups)
            groups.append((None, [event]))
            sizes.append(len(payload))
            continue
        index = open_batch.get(subject)
        size = len(payload) + 1  # and its comma
        if index is None or last_of(workload, -1) > index or sizes[index] + size > MAX_BATCH_BYTES:
            index = open_batch[subject] = len(groups)
            groups.append((subject, []))
            sizes.append(2)  # the brackets
        groups[index][1].append(event)
        sizes[index] += size
        latest[workload] = index
        copies.append((on, payload, msg_id))
    wire: list[Wire] = []
    for batch_on, events in groups:
        if batch_on is None:
            wire.append(events[0][:3])
            continue
        payload = b"[" + b",".join([event.payload for event in events]) + b"]"
        ids = "\n".join([event.msg_id for event in events]).encode()
        digest = hashlib.blake2b(ids, digest_size=16).hexdigest()
        wire.append((batch_on, payload, f"b-{digest}"))
    return wire, copies


class RecentIds:
    """The ids of the last ``size`` events a consumer took from batches.

    Why: the stream's duplicate window drops a single message published again with the same
    id, but not an event published again inside a batch of other contents (a round
    re-published with one more event after a handler's retry). A consumer drops such a
    repeat here, as the stream would have; a redelivery to a restarted service still comes
    through (handlers are idempotent for those, by uid and generation)."""

    def __init__(self, size: int = RECENT_IDS) -> None:
        if size < 1:
            raise ValueError(f"a consumer remembers at least one event id, not {size}")
        # The ids remembered, oldest first, as the takes that brought them: a take's ids
        # are remembered and forgotten by list and set operations, not one at a time.
        self.order: deque[list[str]] = deque()
        self.count = 0  # ids in ``order``
        self.ids: set[str] = set()
        self.size = size

    def firsts(self, events: list[AnyEvent]) -> list[AnyEvent]:
        """The events of ``events`` taken for the first time, in order, each remembered (the
        oldest id forgotten past ``size``) before the next is judged; a repeat is logged.

        A take with no repeat (none of its ids remembered, none twice in it: every take but
        a retried round's) is remembered at once and returned as it is: judged one by one,
        each of its events would be taken and the same ids remembered."""
        taken = [event.id for event in events]
        unique = set(taken)
        if len(unique) == len(taken) and self.ids.isdisjoint(unique):
            if taken:
                self._remember(taken, unique)
            return events
        fresh: list[AnyEvent] = []
        for event, event_id in zip(events, taken, strict=True):
            if self.first(event_id):
                fresh.append(event)
            else:
                log.info("repeat_dropped", event_id=event_id, workload=event.workload.key)
        return fresh

    def first(self, event_id: str) -> bool:
        """Whether ``event_id`` is not remembered (then it is, from now on): a reader that
        shows each event once, quietly (the per-workload view, shared/bus/view.py)."""
        if event_id in self.ids:
            return False
        self._remember([event_id], {event_id})
        return True

    def _remember(self, taken: list[str], unique: set[str]) -> None:
        """Remember ``taken`` (ids not remembered yet) and forget the oldest past ``size``."""
        ids, order = self.ids, self.order
        order.append(taken)
        ids |= unique
        self.count += len(taken)
        while self.count > self.size:
            excess = self.count - self.size
            oldest = order[0]
            if len(oldest) <= excess:
                order.popleft()
                ids.difference_update(oldest)
                self.count -= len(oldest)
            else:
                ids.difference_update(oldest[:excess])
                order[0] = oldest[excess:]
                self.count -= excess


@dataclass(slots=True)
class BatchView:
    """What a consumer keeps of the batches it is sent: per batch subject, whether it wants
    every event of the family (else each event's own subject must match its patterns), and
    the ids it has taken lately."""

    twins: dict[str, bool]
    wanted: Callable[[str], bool]
    # Batches are on: a per-workload copy is never handled (its batch is), even if the server
    # sends one (a consumer still reading what was stored before batches: filters.py).
    drops_copies: bool = False
    recent: RecentIds = field(default_factory=RecentIds)

    @classmethod
    def of(cls, patterns: Sequence[str], batching: bool = False) -> BatchView:
        _, twins = batched_filters(patterns)
        wanted = subject_matcher(patterns) if patterns else lambda _: False
        return cls(twins, wanted, drops_copies=batching)


def expand(
    msg: Msg,
    view: BatchView | None,
    keep: Callable[[str], bool] | None,
    malformed: Callable[[Msg, str], None],
    delivered: Counter[str] | None = None,
) -> list[AnyEvent]:
    """The events of one batch message this consumer keeps (all of its batch's family).

    One decode of the whole array. An event whose own family is not the batch's is refused
    (a user allowed to publish pending reports must not smuggle an admission in a batch on
    ``berth.b.cq.pending``): handed to ``malformed``, never to a handler. Raises
    ``msgspec.DecodeError`` if the payload is not an array of events. ``delivered`` counts
    the events sent in it per family, kept or not (refused ones not).

    An event's family follows from its type (:func:`shared.event_families.subject_family_of`); its
    subject is built only for a view that picks events inside the batch or a ``keep``."""
    family = BATCH_SUBJECTS.get(msg.subject)
    if family is None:
        malformed(msg, f"{msg.subject} is no batch subject of a batched family")
        return []
    events = _list_decoder.decode(msg.data)
    if not all_of_family(events, family):  # checked per batch: judged one by one only here
        events = _of_family(msg, events, family, malformed)
    if delivered is not None and events:
        delivered[family] += len(events)
    pick = None if view is None or view.twins.get(msg.subject, False) else view.wanted
    if pick is not None and keep is not None:
        events = [event for event in events if pick(at := subject_for(event)) and keep(at)]
    elif (wants := pick or keep) is not None:
        events = [event for event in events if wants(subject_for(event))]
    return events if view is None else view.recent.firsts(events)


def _of_family(
    msg: Msg, events: list[AnyEvent], family: str, malformed: Callable[[Msg, str], None]
) -> list[AnyEvent]:
    """The events of a batch on ``msg.subject`` that are of its ``family``, in order; each
    other one is handed to ``malformed`` (:func:`expand`)."""
    kept: list[AnyEvent] = []
    for event in events:
        if subject_family_of(event) != family:
            malformed(
                msg,
                f"event {event.id} ({type(event).__name__}, subject {subject_for(event)}) in a"
                f" batch on {msg.subject}: only {family} events belong there",
            )
            continue
        kept.append(event)
    return kept


def record_of(msg: Msg) -> list[AnyEvent]:
    """The events a stored message adds to the record: a batch's events, a single message's
    event, nothing for a per-workload copy of a batched event (its batch holds it). For
    tools that audit the stream (bench/eventlog.py); raises ``msgspec.DecodeError``."""
    if is_batch(msg.subject):
        return _list_decoder.decode(msg.data)
    if is_copy(msg):
        return []
    return [decode_event(msg.data)]


class Shown(NamedTuple):
    """One event of a stored message as a reader shows it: its JSON as its publisher encoded
    it, and the event, None where it does not decode (a type from a newer Berth)."""

    payload: bytes
    event: AnyEvent | None
    error: str = ""  # why it does not decode


def shown_events(msg: Msg) -> list[Shown]:
    """Each event a stored message holds, decoded one by one (a batch's in order; a copy's
    or a single message's alone), so that one that does not decode leaves the others
    whole. Raises ``msgspec.DecodeError`` for a batch that is not a JSON array."""
    if is_batch(msg.subject):
        payloads = [bytes(raw) for raw in _raw_list_decoder.decode(msg.data)]
    else:
        payloads = [msg.data]
    shown = []
    for payload in payloads:
        try:
            shown.append(Shown(payload, decode_event(payload)))
        except msgspec.DecodeError as error:
            shown.append(Shown(payload, None, str(error)))
    return shown


def record_events(msg: Msg) -> list[AnyEvent]:
    """:func:`record_of`, each event judged on its own: one that does not decode (a type
    from a newer Berth, a malformed one) is left out and logged, not the rest of its batch.
    For readers that show or react to what they can (the console, the Kubernetes status
    writer), where one unknown event must not hide the others."""
    try:
        return record_of(msg)
    except msgspec.DecodeError:
        pass
    try:
        shown = shown_events(msg)
    except msgspec.DecodeError as error:
        log.warning("malformed_event", subject=msg.subject, error=str(error))
        return []
    events = []
    for item in shown:
        if item.event is None:
            log.warning("malformed_event", subject=msg.subject, error=item.error)
        else:
            events.append(item.event)
    return events
