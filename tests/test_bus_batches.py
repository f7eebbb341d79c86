"""Batches on the bus (shared/bus/batches.py, docs/events.md "Batches"): the rules as tables,
and the round trip against a real nats-server, secured where permissions matter."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg
from prometheus_client import REGISTRY

from bench.eventlog import read_events
from services.admission.reading import FOLDED_SUBJECTS, deciding_subjects
from services.preemption.service import folded_subjects
from services.recovery.service import subjects_for
from shared.auth import ClientAuth, CredentialStore
from shared.bus import STREAM, Bus
from shared.bus.batches import MAX_BATCH_BYTES, Prepared, batched
from shared.bus.settings import BusSettings
from shared.event_families import subject_family_of
from shared.events import (
    SUBJECT_PARTS,
    AnyEvent,
    Event,
    EvictionRequested,
    LeaderElected,
    PodSet,
    WorkloadAdmitted,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
    encode_event,
    now,
    subject_for,
)
from shared.subjects import FAMILY_PATTERNS, batched_filters, subject_family
from tests.conftest import bus_auth, connect_as, connect_open

BATCHES = BusSettings(batching=True)
MESSAGES_READ = "berth_bus_messages_read_total"

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


def _ref(name: str) -> WorkloadRef:
    return WorkloadRef("default", name, f"uid-{name}")


def _about(name: str, source: str = "admission") -> dict[str, Any]:
    """What every test event carries: its source and workload, and the ClusterQueue."""
    return {"source": source, "workload": _ref(name), "cluster_queue": "cq"}


def _submitted(name: str) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        id=f"submitted-{name}",
        source="watcher",
        workload=_ref(name),
        kind="Job",
        queue_name="lq",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=now(),
    )


def _admitted(name: str, generation: int = 1) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id=f"admitted-{name}-{generation}",
        local_queue="lq",
        priority=0,
        generation=generation,
        assignments=[],
        **_about(name),
    )


def _pending(name: str) -> WorkloadPending:
    return WorkloadPending(id=f"pending-{name}", reason="Pending", message="-", **_about(name))


def _evict(name: str) -> EvictionRequested:
    return EvictionRequested(id=f"evict-{name}", generation=1, reason="Preempted", **_about(name))


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


async def _connect(url: str, source: str) -> Bus:
    bus = await connect_open(url, source, BATCHES)
    await bus.ensure_stream()
    return bus


async def _replayed(bus: Bus, subjects: list[str], count: int) -> list[AnyEvent]:
    """What a replay consumer of ``subjects`` is handed, once it has ``count`` events."""
    subscription = await bus.replay_subscription(subjects)
    events: list[AnyEvent] = []
    while len(events) < count:
        batch = await bus.next_batch(subscription, wait=5.0)
        assert batch, f"only {len(events)} of {count} events came"
        events += batch
    assert await bus.next_batch(subscription, wait=0.3) == [], "and nothing more"
    return events


async def test_batches_round_trip_once_each_despite_the_copies(nats_url: str) -> None:
    """A round goes out as batches plus per-workload copies; a consumer of every subject is
    handed each event once (the batches, not the copies), and the audit reads it once."""
    bus = await _connect(nats_url, "admission")
    try:
        round_ = [_admitted("a"), _pending("b"), _admitted("c"), _submitted("d")]
        await bus.publish_many(round_)
        await bus.publish(_pending("e"))  # a single publish of a batched family: a batch of one
        events = await _replayed(bus, ["berth.>"], 5)
        assert sorted(e.id for e in events) == [
            "admitted-a-1",
            "admitted-c-1",
            "pending-b",
            "pending-e",
            "submitted-d",
        ]
        state = (await bus.js.stream_info(STREAM)).state
        assert state.messages == 4 + 5, "three batches and a batch of one, and five copies"
        stored = await read_events(nats_url, auth=bus_auth(nats_url))
        assert sorted(e.id for e in stored) == sorted(e.id for e in events)
        narrow = await _replayed(bus, ["berth.cq.*.admitted.default.c"], 1)
        assert [e.id for e in narrow] == ["admitted-c-1"], "a narrow pattern picks inside a batch"
    finally:
        await bus.close()


async def test_copies_are_stored_before_their_batch_so_the_view_keeps_cause_and_effect(
    nats_url: str,
) -> None:
    """Each copy is stored before the batch that carries its event, so whatever a service
    does on reading the batch (here: admission admits what the watcher submitted) comes after
    the copy in the per-workload view; copies sent after the batch's ack could come after
    the reaction (`berth events -f` showed an admission before its submission)."""
    watcher = await _connect(nats_url, "watcher")
    admission = await _connect(nats_url, "admission")
    try:
        await watcher.publish_many([_submitted("a"), _submitted("b")])
        [submitted_a, submitted_b] = await _replayed(admission, ["berth.wl.submitted.>"], 2)
        await admission.publish_many(
            [_admitted(e.workload.name) for e in (submitted_a, submitted_b)]
        )
        stored = []  # the stream in order: a batch by its subject, a copy by its family
        for seq in range(1, (await watcher.js.stream_info(STREAM)).state.last_seq + 1):
            subject = (await watcher.js.get_msg(STREAM, seq)).subject or ""
            stored.append(subject if subject.startswith("berth.b.") else subject_family(subject))
        assert stored == [
            "wl.submitted",
            "wl.submitted",
            "berth.b.wl.submitted",
            "cq.*.admitted",
            "cq.*.admitted",
            "berth.b.cq.admitted",
        ]
    finally:
        await watcher.close()
        await admission.close()


async def test_a_retried_batch_is_stored_once(nats_url: str) -> None:
    """The same round sent again (an unknown outcome retried) has the same message id, and
    so has a fact reported again at another time (the kube backend's started, after a
    redelivered admission): the stream keeps one, as it kept one of a repeated single event."""
    bus = await _connect(nats_url, "admission")
    try:
        round_ = [_admitted("a"), _admitted("b")]
        await bus.publish_many(round_)
        await bus.publish_many(round_)
        started = WorkloadStarted(
            id="started-a-1", source="watcher", workload=_ref("a"), generation=1
        )
        await bus.publish(started)
        await bus.publish(msgspec.structs.replace(started, time=now()))
        info = await bus.js.stream_info(STREAM, subjects_filter="berth.b.>")
        assert info.state.subjects == {"berth.b.cq.admitted": 1, "berth.b.wl.started": 1}
    finally:
        await bus.close()


async def test_an_event_smuggled_into_another_familys_batch_is_refused(nats_url: str) -> None:
    """An admission inside a batch on berth.b.cq.pending never reaches a handler: it is
    handed to the malformed path (dead letters), and the pending report beside it is kept."""
    bus = await _connect(nats_url, "preemption")
    refused: list[str] = []

    def malformed(msg: Msg, reason: str) -> None:
        refused.append(reason)

    bus.on_malformed = malformed
    try:
        payload = b"[" + encode_event(_pending("a")) + b"," + encode_event(_admitted("x")) + b"]"
        await bus.publish_raw("berth.b.cq.pending", payload, "smuggle-1")
        events = await _replayed(bus, ["berth.cq.>"], 1)
        assert [e.id for e in events] == ["pending-a"]
        assert len(refused) == 1 and "only cq.*.pending events belong there" in refused[0]
    finally:
        await bus.close()


async def test_copies_are_the_per_workload_view_for_a_read_only_user(
    secured_url: str, store: CredentialStore
) -> None:
    """A tool signed in as the reader follows one ClusterQueue by subject and sees each of
    admission's batched decisions there; admission may publish its batches, and the reader
    reads them as well."""
    admission = await connect_as(secured_url, store, "admission", BATCHES)
    reader = await connect_as(secured_url, store, "reader")
    try:
        await admission.ensure_stream()
        await admission.publish_many([_admitted("a"), _pending("b")])
        received: list[str] = []
        done = asyncio.Event()

        async def follow(msg: Msg) -> None:
            received.append(msg.subject)
            if len(received) == 2:
                done.set()

        await reader.js.subscribe("berth.cq.cq.>", stream=STREAM, cb=follow, ordered_consumer=True)
        await asyncio.wait_for(done.wait(), 5)
        assert received == ["berth.cq.cq.admitted.default.a", "berth.cq.cq.pending.default.b"]
        assert sorted(e.id for e in await _replayed(reader, ["berth.cq.>"], 2)) == [
            "admitted-a-1",
            "pending-b",
        ]
    finally:
        await admission.close()
        await reader.close()


async def test_a_durable_consumer_handles_each_event_once(nats_url: str) -> None:
    """The watcher's kind of consumer (durable, acks all) is handed batches, never the copies:
    each decision once."""
    bus = await _connect(nats_url, "watcher")
    try:
        await bus.publish_many([_admitted(f"w{index}") for index in range(50)])
        await bus.publish_many([_evict("w1"), _admitted("w1", 2)])
        subscription = await bus.durable_subscription(
            "watcher", ["berth.cq.*.admitted.>", "berth.cq.*.evict.>"]
        )
        handled: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(e.id for e in events)
            if len(handled) >= 52:
                stop.set()

        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        assert len(handled) == len(set(handled)) == 52
        assert handled[-2:] == ["evict-w1", "admitted-w1-2"], "in the order they were decided"
    finally:
        await bus.close()


def test_started_stays_a_fact() -> None:
    """Guard for the table: WorkloadStarted is a batched watcher fact."""
    event = WorkloadStarted(id="s", source="watcher", workload=_ref("a"), generation=1)
    assert _shape([event]) == [("berth.b.wl.started", 1)]


async def test_an_event_repeated_in_another_batch_is_handled_once(nats_url: str) -> None:
    """A round published again with one more event is another batch (the stream keeps both),
    but a consumer takes each event once, as the stream's duplicate window would have."""
    bus = await _connect(nats_url, "admission")
    try:
        await bus.publish_many([_admitted("a"), _admitted("b")])
        await bus.publish_many([_admitted("a"), _admitted("b"), _admitted("c")])
        info = await bus.js.stream_info(STREAM, subjects_filter="berth.b.>")
        assert info.state.subjects == {"berth.b.cq.admitted": 2}
        events = await _replayed(bus, ["berth.cq.>"], 3)
        assert [e.id for e in events] == ["admitted-a-1", "admitted-b-1", "admitted-c-1"]
    finally:
        await bus.close()


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


async def test_a_stream_written_before_batches_is_read_whole(nats_url: str) -> None:
    """Events stored one message each (an older Berth, or batches off) before the first
    batch reach a replay and a durable consumer once each, in stream order, with the batched
    events after them; once past them, the consumers are sent batch subjects only."""
    before = await Bus.connect(
        nats_url, source="test", auth=ClientAuth(), settings=BusSettings(batching=False)
    )
    bus = await _connect(nats_url, "watcher")
    try:
        await before.ensure_stream()
        await before.publish_many([_admitted("a"), _submitted("b"), _evict("a")])
        await bus.publish_many([_admitted("a", 2), _pending("c")])
        subjects = ["berth.cq.>", "berth.wl.>"]
        order = ["admitted-a-1", "submitted-b", "evict-a", "admitted-a-2", "pending-c"]
        replay = await bus.replay_subscription(subjects)
        folded: list[AnyEvent] = []
        await bus.replay_to_end(replay, folded.extend)
        assert [e.id for e in folded] == order
        durable = await bus.durable_subscription("upgraded", subjects)
        handled: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(e.id for e in events)
            if len(handled) >= len(order):
                stop.set()

        await asyncio.wait_for(bus.consume(durable, handler, stopping=stop), 10)
        assert handled == order
        for subscription in (replay, durable):
            filters = (await subscription.consumer_info()).config.filter_subjects or []
            assert not [f for f in filters if f.startswith(("berth.cq.", "berth.wl."))], filters
    finally:
        await before.close()
        await bus.close()


# (reader, its subjects with batches on, the publisher of the reports it reads, why)
PENDING_READERS: list[tuple[str, list[str], str, str]] = [
    ("preemption", list(folded_subjects(batching=True)), "admission",
     "its fold needs a preemptor's report"),
    ("recovery", subjects_for([], batching=True), "admission",
     "a wait's ClusterQueue comes from it"),
    ("admission's deciding leader", list(deciding_subjects(batching=True)), "preemption",
     "it reads preemption's answers"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("reader", "subjects", "source", "why"), PENDING_READERS, ids=[p[0] for p in PENDING_READERS]
)
async def test_pending_reports_from_before_batches_reach_one_publishers_readers(
    nats_url: str, reader: str, subjects: list[str], source: str, why: str
) -> None:
    """A reader of one publisher's pending reports (shared.subjects.pending_reports_of) that
    starts before the first batch still reads the reports stored one message each, as its
    subjects' pattern is kept: else a preemptor that waited across an upgrade was never
    looked at again (admission does not report an unchanged wait twice)."""
    before = await Bus.connect(
        nats_url, source="test", auth=ClientAuth(), settings=BusSettings(batching=False)
    )
    bus = await _connect(nats_url, "watcher")
    try:
        await before.ensure_stream()
        report = msgspec.structs.replace(_pending("a"), source=source)
        await before.publish_many([_submitted("a"), report])
        await bus.publish_many([_submitted("b")])
        replay = await bus.replay_subscription(subjects)
        folded: list[AnyEvent] = []
        await bus.replay_to_end(replay, folded.extend)
        assert "pending-a" in [e.id for e in folded], f"{reader}: {why}"
    finally:
        await before.close()
        await bus.close()


async def test_a_batch_counts_each_event_sent_and_each_one_decoded(nats_url: str) -> None:
    """The read counts (what bench/kueue_scheduler.py tabulates) stay per event: every event
    of a batch counts as sent, only those the consumer keeps (its subjects pick events
    inside the batch) as decoded."""
    bus = await _connect(nats_url, "recovery")
    try:
        started = [
            WorkloadStarted(
                id=f"started-{name}", source="watcher", workload=_ref(name), generation=1
            )
            for name in ("a", "b", "kept")
        ]
        await bus.publish_many(started)
        subscription = await bus.durable_subscription("counted", ["berth.wl.started.*.kept"])
        stop = asyncio.Event()
        handled: list[str] = []

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(e.id for e in events)
            stop.set()

        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        assert handled == ["started-kept"]
        labels = {"consumer": "counted", "subject": "wl.started"}
        sent = REGISTRY.get_sample_value(MESSAGES_READ, {**labels, "stage": "delivered"})
        decoded = REGISTRY.get_sample_value(MESSAGES_READ, {**labels, "stage": "decoded"})
        assert (sent, decoded) == (3, 1)
    finally:
        await bus.close()


async def test_admissions_deciding_leader_is_sent_preemptions_pending_reports_not_its_own(
    nats_url: str,
) -> None:
    """Preemption's pending reports go in batches of their own subject; a consumer of the
    deciding leader's subjects is sent those and not admission's, while a standby's (the
    whole fold) and a tool following pending reports by subject are sent both."""
    admission_bus = await _connect(nats_url, "admission")
    preemption_bus = await _connect(nats_url, "preemption")
    try:
        await admission_bus.publish_many([_pending("a"), _pending("b")])
        await preemption_bus.publish_many([_pending("c")])
        batches = (await admission_bus.js.stream_info(STREAM, subjects_filter="berth.b.>")).state
        assert batches.subjects == {"berth.b.cq.pending": 1, "berth.b.cq.pending.preemption": 1}
        deciding = await _replayed(admission_bus, list(deciding_subjects(batching=True)), 1)
        assert [e.id for e in deciding] == ["pending-c"], "only preemption's"
        standby = await _replayed(admission_bus, list(FOLDED_SUBJECTS), 3)
        assert sorted(e.id for e in standby) == ["pending-a", "pending-b", "pending-c"]
        tool = await _replayed(admission_bus, ["berth.cq.*.pending.default.c"], 1)
        assert [e.id for e in tool] == ["pending-c"], "one workload, by its subject"
        for reader, subjects in [
            ("preemption", folded_subjects(batching=True)),
            ("recovery", subjects_for([], batching=True)),
        ]:
            read = await _replayed(admission_bus, list(subjects), 2)
            pending = sorted(e.id for e in read if isinstance(e, WorkloadPending))
            assert pending == ["pending-a", "pending-b"], f"{reader}: only admission's"
    finally:
        await admission_bus.close()
        await preemption_bus.close()
