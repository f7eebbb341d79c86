"""Batches on the bus (shared/bus/batches.py, docs/events.md "Batches"): the rules as
tables (which filters a pattern needs, how a round becomes batches, their ids)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from shared.bus.batches import MAX_BATCH_BYTES, Prepared, batched
from shared.event_families import subject_family_of
from shared.events import (
    SUBJECT_PARTS,
    Event,
    LeaderElected,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
    encode_event,
    subject_for,
)
from shared.subjects import FAMILY_PATTERNS, batched_filters
from tests.batched_bus import _admitted, _evict, _pending, _ref, _submitted

# (a consumer's pattern, the server's filters, batch subjects wanted whole, why)
FILTER_CASES = [
    (
        "berth.cq.*.admitted.>",
        ["berth.b.cq.admitted"],
        {"berth.b.cq.admitted": True},
        "one batched family: its batch subject, never the per-workload copies",
    ),
    (
        "berth.cq.*.pending.>",
        ["berth.b.cq.pending", "berth.b.cq.pending.preemption"],
        {"berth.b.cq.pending": True, "berth.b.cq.pending.preemption": True},
        "pending reports: admission's batches and preemption's, each on their own subject",
    ),
    (
        "berth.b.cq.pending.preemption",
        ["berth.b.cq.pending.preemption"],
        {"berth.b.cq.pending.preemption": True},
        "a batch subject named as it is: every event of its batches (admission's deciding leader)",
    ),
    (
        "berth.cq.team-a.>",
        [
            "berth.b.cq.admitted",
            "berth.b.cq.reserved",
            "berth.b.cq.pending",
            "berth.b.cq.pending.preemption",
            "berth.b.cq.evict",
        ],
        dict.fromkeys(
            [
                "berth.b.cq.admitted",
                "berth.b.cq.reserved",
                "berth.b.cq.pending",
                "berth.b.cq.pending.preemption",
                "berth.b.cq.evict",
            ],
            False,
        ),
        "one ClusterQueue: every cq batch, each event inside matched against the pattern",
    ),
    (
        "berth.cmd.>",
        ["berth.cmd.>"],
        {},
        "commands stay single messages (the watcher reads a name's newest by its subject)",
    ),
    (
        "berth.check.>",
        ["berth.check.>"],
        {},
        "admission checks' answers are never batched: the pattern is kept whole",
    ),
    (
        "berth.lease.>",
        ["berth.lease.>"],
        {},
        "lease markers are single messages",
    ),
    (
        "berth.wl.started.default.job-1",
        ["berth.b.wl.started"],
        {"berth.b.wl.started": False},
        "one workload's fact: its family's batches, the workload picked out inside",
    ),
    (
        "berth.job.>",
        ["berth.b.job.boost", "berth.b.job.status"],
        {"berth.b.job.boost": True, "berth.b.job.status": True},
        "managed-job records are batched, both families",
    ),
]


@pytest.mark.parametrize(
    ("pattern", "filters", "twins", "reason"), FILTER_CASES, ids=[c[3] for c in FILTER_CASES]
)
def test_batch_twins_of_a_pattern(
    pattern: str, filters: list[str], twins: dict[str, bool], reason: str
) -> None:
    assert batched_filters([pattern]) == (filters, twins), reason


def test_every_event_has_a_family_that_is_batched_or_not() -> None:
    """A new event type must be placed: batched (a service's) or single (commands, checks,
    markers), else its events would fall through the consumers' filters."""
    for family, verb in SUBJECT_PARTS.values():
        if family == "cq":
            name = f"cq.*.{verb}"
        elif family in ("check", "lease"):
            name = f"{family}.*"
        else:
            name = f"{family}.{verb}"
        assert name in FAMILY_PATTERNS, name
    assert "cq.*.reserved" in FAMILY_PATTERNS


def _prepared(event: Event) -> Prepared:
    return Prepared.of(event)


def _shape(events: list[Event]) -> list[tuple[str, int]]:
    """The messages that publish ``events``: (subject, how many events inside)."""
    wire, _ = batched([_prepared(e) for e in events])
    return [
        (subject, len(msgspec.json.decode(payload)) if subject.startswith("berth.b.") else 1)
        for subject, payload, _ in wire
    ]


# (events published in one round, the messages that carry them, why)
GROUPING_CASES: list[tuple[Callable[[], list[Event]], list[tuple[str, int]], str]] = [
    (
        lambda: [_admitted("a"), _pending("b"), _admitted("c"), _pending("d")],
        [("berth.b.cq.admitted", 2), ("berth.b.cq.pending", 2)],
        "a round of many workloads is one message per family",
    ),
    (
        lambda: [_admitted("a"), _evict("a"), _admitted("a", 2)],
        [("berth.b.cq.admitted", 1), ("berth.b.cq.evict", 1), ("berth.b.cq.admitted", 1)],
        "one workload's events keep their order: its next admission never overtakes its eviction",
    ),
    (
        lambda: [_submitted("a"), _admitted("b")],
        [("berth.b.wl.submitted", 1), ("berth.b.cq.admitted", 1)],
        "each family its own batch subject",
    ),
]


@pytest.mark.parametrize(
    ("events", "shape", "reason"), GROUPING_CASES, ids=[c[2] for c in GROUPING_CASES]
)
def test_a_round_becomes_batches(
    events: Callable[[], list[Event]], shape: list[tuple[str, int]], reason: str
) -> None:
    assert _shape(events()) == shape, reason


def test_a_round_too_big_for_one_message_is_split() -> None:
    many = [_pending(f"job-{index}-{'x' * 200}") for index in range(3000)]
    wire, copies = batched([_prepared(e) for e in many])
    assert len(wire) > 1 and all(len(payload) <= MAX_BATCH_BYTES for _, payload, _ in wire)
    assert sum(len(msgspec.json.decode(p)) for _, p, _ in wire) == len(copies) == 3000


def _lease() -> LeaderElected:
    return LeaderElected(id="lease-admission-2", source="admission", role="admission", holder="r1")


# (events published in one round, the messages sent (subject, message id), the copies sent
# before them (subject, message id), why): the ids are those the stream dedupes by, so a
# batch's id (a digest of its events' ids) must stay as it was computed from the start.
WIRE_CASES: list[
    tuple[Callable[[], list[Event]], list[tuple[str, str]], list[tuple[str, str]], str]
] = [
    (
        lambda: [_admitted("a"), _pending("b"), _admitted("c"), _pending("d")],
        [
            ("berth.b.cq.admitted", "b-d474a065b294cddd506686ce8206f193"),
            ("berth.b.cq.pending", "b-8c88385c0720f5c2ea355bbe310c2582"),
        ],
        [
            ("berth.cq.cq.admitted.default.a", "admitted-a-1"),
            ("berth.cq.cq.pending.default.b", "pending-b"),
            ("berth.cq.cq.admitted.default.c", "admitted-c-1"),
            ("berth.cq.cq.pending.default.d", "pending-d"),
        ],
        "one batch per family, each copy on its workload's subject with its event's id",
    ),
    (
        lambda: [_admitted("a"), _evict("a"), _admitted("a", 2)],
        [
            ("berth.b.cq.admitted", "b-dd838892e648967c2b3f51d1dca7f0ee"),
            ("berth.b.cq.evict", "b-8328b3c374a043fb5db4aa93947eef14"),
            ("berth.b.cq.admitted", "b-448fb59ac969f85d209263262a05723c"),
        ],
        [
            ("berth.cq.cq.admitted.default.a", "admitted-a-1"),
            ("berth.cq.cq.evict.default.a", "evict-a"),
            ("berth.cq.cq.admitted.default.a", "admitted-a-2"),
        ],
        "a workload's later event opens a new batch after its earlier one's",
    ),
    (
        lambda: [_pending("b"), _lease(), _pending("c")],
        [
            ("berth.b.cq.pending", "b-7c157f728fc0c9441691a638c6e72c3f"),
            ("berth.lease.admission", "lease-admission-2"),
        ],
        [
            ("berth.cq.cq.pending.default.b", "pending-b"),
            ("berth.cq.cq.pending.default.c", "pending-c"),
        ],
        "an unbatched event is a single message with no copy; another workload's event"
        " joins the batch opened before it",
    ),
    (
        lambda: [msgspec.structs.replace(_admitted("é"), id="admitted-é")],
        [("berth.b.cq.admitted", "b-a343039333da5447a0a41bdf5fd858ec")],
        [("berth.cq.cq.admitted.default.é", "admitted-é")],
        "a batch's id digests its events' ids as UTF-8",
    ),
]


@pytest.mark.parametrize(
    ("events", "messages", "copies", "why"), WIRE_CASES, ids=[c[-1] for c in WIRE_CASES]
)
def test_a_round_goes_out_as_these_messages_with_these_ids(
    events: Callable[[], list[Event]],
    messages: list[tuple[str, str]],
    copies: list[tuple[str, str]],
    why: str,
) -> None:
    round_ = events()
    wire, sent_copies = batched([_prepared(e) for e in round_])
    assert [(subject, msg_id) for subject, _, msg_id in wire] == messages, why
    assert [(subject, msg_id) for subject, _, msg_id in sent_copies] == copies, why
    assert all(type(message) is tuple for message in wire + sent_copies), why
    encoded = {e.id: encode_event(e) for e in round_}
    assert [payload for _, payload, _ in sent_copies] == [encoded[i] for _, i in copies], why
    for subject, payload, msg_id in wire:
        if subject.startswith("berth.b."):  # the events inside, each as its copy encodes it
            ids = [event["id"] for event in msgspec.json.decode(payload)]
            assert payload == b"[" + b",".join(encoded[i] for i in ids) + b"]", why
        else:
            assert payload == encoded[msg_id], why


# (an event, why): Prepared.of builds its tuple without NamedTuple's __new__: each field
# must be in its place, and the tuple a Prepared.
PREPARED_CASES: list[tuple[Callable[[], Event], str]] = [
    (lambda: _admitted("a"), "an admission: a cq subject, its family"),
    (
        lambda: msgspec.structs.replace(_admitted("a"), reserved_only=True),
        "a reservation: its own family and verb",
    ),
    (
        lambda: WorkloadPending(
            id="p",
            reason="r",
            message="m",
            source="admission",
            workload=WorkloadRef("team.a", "job.1", "u"),
            cluster_queue="cq",
        ),
        "dotted names: the subject's tokens are made safe, the key keeps the names",
    ),
    (_lease, "about no workload: the key of an empty reference"),
]


@pytest.mark.parametrize(("event", "why"), PREPARED_CASES, ids=[c[-1] for c in PREPARED_CASES])
def test_a_prepared_event_is_its_subject_payload_id_workload_and_family(
    event: Callable[[], Event], why: str
) -> None:
    made = event()
    prepared = Prepared.of(made)
    assert type(prepared) is Prepared, why
    assert prepared == (
        subject_for(made),
        encode_event(made),
        made.id,
        made.workload.key,
        subject_family_of(made),
    ), why
    assert (prepared.subject, prepared.msg_id, prepared.family) == (
        subject_for(made),
        made.id,
        subject_family_of(made),
    ), why


def test_a_round_prepared_together_is_each_event_prepared_in_its_place() -> None:
    """Prepared.each (what a bus publishes a round with): every case's event at once, a
    reservation after an admission of the same type among them, each its own tuple in
    order, as Prepared.of makes it alone."""
    made = [event() for event, _ in PREPARED_CASES]
    prepared = Prepared.each(made)
    assert [type(one) for one in prepared] == [Prepared] * len(made)
    assert prepared == [
        (subject_for(m), encode_event(m), m.id, m.workload.key, subject_family_of(m)) for m in made
    ]


def test_started_stays_a_fact() -> None:
    """Guard for the table: WorkloadStarted is a batched watcher fact."""
    event = WorkloadStarted(id="s", source="watcher", workload=_ref("a"), generation=1)
    assert _shape([event]) == [("berth.b.wl.started", 1)]
