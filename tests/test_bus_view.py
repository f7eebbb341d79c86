"""The per-workload view when a deployment keeps fewer copies (``BERTH_BUS_COPIES``,
shared/bus/view.py, docs/events.md "The per-workload view"): the setting's rules as tables, and
readers (``berth events``, ``berth describe``, the console) against a real nats-server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from nats.js import api

from berth_cli.events import recorded
from berth_console.model import Model
from berth_console.pages.base import Context
from berth_console.pages.workload import WorkloadView
from berth_console.pending import PendingCache
from berth_console.queries import Queries
from shared.auth import CredentialStore
from shared.bus import STREAM, STREAM_SUBJECTS, Bus
from shared.bus.batches import record_events
from shared.bus.settings import ALL_COPIES, BusSettings, copy_patterns
from shared.bus.view import (
    SINCE_METADATA,
    StoredCopies,
    ViewReading,
    copies_in,
    stream_metadata,
)
from shared.events import AnyEvent, Event, subject_for
from tests.conftest import connect_as, connect_open
from tests.console_data import admitted, pending, started, submitted

# (BERTH_BUS_COPIES, the patterns it keeps, why)
ACCEPTED = [
    ("all", ALL_COPIES, "the default: every batched event has its copy"),
    ("none", (), "no copies: readers derive the view from the batches"),
    (
        "berth.wl.*.team-a.*, berth.job.>",
        ("berth.wl.*.team-a.*", "berth.job.>"),
        "a list of patterns, spaces around the commas dropped",
    ),
    ("berth.>", ALL_COPIES, "every subject is the same as all"),
]

# (BERTH_BUS_COPIES, what the error names, why)
REFUSED = [
    ("", "all, none or subject patterns", "empty: nothing says which copies"),
    ("berth.cmd.>", "matches no batched event's subject", "commands are never batched"),
    ("berth.check.>", "always stored one message each", "nor are admission checks' answers"),
    ("berth..wl", "is not a NATS subject pattern", "an empty token"),
    ("berth.>.wl", "is not a NATS subject pattern", "> only as the last token"),
    ("berth.wl*", "is not a NATS subject pattern", "a wildcard is a whole token"),
    ("berth.wl.started, ,", "berth.wl.started", "a subject of no event (no names) matches none"),
]


@pytest.mark.parametrize(("raw", "patterns", "reason"), ACCEPTED)
def test_copies_setting_accepted(raw: str, patterns: tuple[str, ...], reason: str) -> None:
    assert copy_patterns(raw) == patterns, reason


@pytest.mark.parametrize(("raw", "named", "reason"), REFUSED)
def test_copies_setting_refused(raw: str, named: str, reason: str) -> None:
    with pytest.raises(ValueError, match="BERTH_BUS_COPIES") as refused:
        BusSettings.from_env({"BERTH_BUS_COPIES": raw})
    assert named in str(refused.value), reason


TEAM_A = ["berth.wl.*.team-a.*", "berth.cq.*.*.team-a.*"]

# (patterns a reader asks for, the copies kept, its server filters, read from copies, why)
READINGS = [
    (TEAM_A, ALL_COPIES, TEAM_A, True, "every copy kept: the server filters by subject"),
    (
        TEAM_A,
        (),
        [
            *TEAM_A,
            *(f"berth.b.wl.{verb}" for verb in ("submitted", "started", "finished")),
            *(f"berth.b.wl.{verb}" for verb in ("evicted", "deleted", "podsready")),
            *(f"berth.b.cq.{verb}" for verb in ("admitted", "reserved", "pending", "evict")),
            "berth.b.cq.pending.preemption",
        ],
        False,
        "no copies: the batches of every family asked for (and events stored one each)",
    ),
    (
        ["berth.wl.*.team-a.*"],
        ("berth.wl.>",),
        ["berth.wl.*.team-a.*"],
        True,
        "the facts' copies are kept, and only facts are asked for",
    ),
    (
        TEAM_A,
        ("berth.wl.>",),
        [
            *TEAM_A,
            *(f"berth.b.wl.{verb}" for verb in ("submitted", "started", "finished")),
            *(f"berth.b.wl.{verb}" for verb in ("evicted", "deleted", "podsready")),
            *(f"berth.b.cq.{verb}" for verb in ("admitted", "reserved", "pending", "evict")),
            "berth.b.cq.pending.preemption",
        ],
        False,
        "decisions have no copies: one consumer reads it all from the batches",
    ),
    (
        ["berth.cmd.*.team-a.*"],
        (),
        ["berth.cmd.*.team-a.*"],
        True,
        "commands are stored one message each: nothing to derive",
    ),
    (["berth.>"], (), ["berth.>"], False, "everything: the batches come with it, copies skipped"),
    (
        ["berth.>"],
        ALL_COPIES,
        ["berth.>"],
        False,
        "everything, copies or not: the record (batches), whole whenever copies were kept",
    ),
    (
        ["berth.cq.*.admitted.>"],
        ALL_COPIES,
        ["berth.cq.*.admitted.>", "berth.b.cq.admitted"],
        False,
        "a whole family: its batches, which cost no more than its copies",
    ),
]


@pytest.mark.parametrize(("patterns", "copies", "filters", "from_copies", "reason"), READINGS)
def test_how_a_reader_reads_the_view(
    patterns: list[str],
    copies: tuple[str, ...],
    filters: list[str],
    from_copies: bool,
    reason: str,
) -> None:
    reading = ViewReading.of(patterns, StoredCopies(copies))
    assert (sorted(reading.filters), reading.from_copies) == (sorted(filters), from_copies), reason


T1 = datetime(2026, 11, 26, 4, 0, tzinfo=UTC)
T2 = T1 + timedelta(hours=1)
ADMISSION, WATCHER = "berth.copies.admission", "berth.copies.watcher"

# (the stream's metadata, what a reader may count on, why)
STORED = [
    (None, StoredCopies(ALL_COPIES), "a stream an older Berth made: it kept every copy"),
    ({ADMISSION: "none", WATCHER: "none"}, StoredCopies(()), "every service keeps none"),
    (
        {ADMISSION: "berth.wl.>,berth.job.>", WATCHER: "berth.wl.>,berth.job.>"},
        StoredCopies(("berth.wl.>", "berth.job.>")),
        "every service keeps the same list",
    ),
    (
        {ADMISSION: "none", WATCHER: "berth.>", "ops.owner": "platform"},
        StoredCopies(()),
        "services that disagree: count on none, derive all from the batches",
    ),
    (
        {ADMISSION: "berth.>", SINCE_METADATA: T1.isoformat()},
        StoredCopies(ALL_COPIES, T1),
        "every copy, but only since a setting changed",
    ),
]


@pytest.mark.parametrize(("metadata", "stored", "reason"), STORED)
def test_copies_read_from_the_streams_metadata(
    metadata: dict[str, str] | None, stored: StoredCopies, reason: str
) -> None:
    assert copies_in(metadata) == stored, reason


# (metadata before, the service starting and its copies, metadata after, why)
STARTS = [
    (None, "admission", ALL_COPIES, {ADMISSION: "berth.>"}, "the default on a new stream"),
    (
        None,
        "admission",
        (),
        {ADMISSION: "none", SINCE_METADATA: T2.isoformat()},
        "none on a new stream: copies are complete from now (there were none before)",
    ),
    (
        {WATCHER: "none", "ops.owner": "platform", SINCE_METADATA: T1.isoformat()},
        "admission",
        (),
        {
            ADMISSION: "none",
            WATCHER: "none",
            "ops.owner": "platform",
            SINCE_METADATA: T2.isoformat(),
        },
        "another service's setting and an operator's key are kept",
    ),
    (
        {ADMISSION: "none", SINCE_METADATA: T1.isoformat()},
        "admission",
        (),
        {ADMISSION: "none", SINCE_METADATA: T1.isoformat()},
        "a restart with the same setting: since stays",
    ),
    (
        {ADMISSION: "none", SINCE_METADATA: T1.isoformat()},
        "admission",
        ALL_COPIES,
        {ADMISSION: "berth.>", SINCE_METADATA: T2.isoformat()},
        "copies turned back on: complete only from now",
    ),
]


@pytest.mark.parametrize(("before", "source", "copies", "after", "reason"), STARTS)
def test_a_service_records_its_copies_in_the_streams_metadata(
    before: dict[str, str] | None,
    source: str,
    copies: tuple[str, ...],
    after: dict[str, str],
    reason: str,
) -> None:
    assert stream_metadata(before, source, copies, T2) == after, reason


# (copies since, the read's start, read from the copies, why)
STARTS_OF_READS = [
    (None, None, True, "copies since the stream began: any read"),
    (T1, None, False, "a read from the first event reaches before the copies were complete"),
    (T1, T1 - timedelta(seconds=1), False, "a read that starts before"),
    (T1, T2, True, "a read that starts after"),
]


@pytest.mark.parametrize(("since", "start", "from_copies", "reason"), STARTS_OF_READS)
def test_a_read_from_before_the_copies_were_complete_is_derived(
    since: datetime | None, start: datetime | None, from_copies: bool, reason: str
) -> None:
    reading = ViewReading.of(TEAM_A, StoredCopies(ALL_COPIES, since), start)
    assert reading.from_copies is from_copies, reason


def _life(namespace: str, name: str) -> list[Event]:
    """A workload's submission, pending report, admission and start."""
    return [
        submitted(name, namespace=namespace),
        pending(name, namespace=namespace),
        admitted(name, namespace=namespace),
        started(name, namespace=namespace),
    ]


async def _published(url: str, copies: tuple[str, ...]) -> list[Event]:
    """Two rounds about workloads in two namespaces, published as a service whose deployment
    keeps ``copies``; the events in the order published."""
    bus = await connect_open(url, "admission", BusSettings(copies=copies))
    lives = [_life("team-a", "a"), _life("team-b", "b"), _life("team-a", "c")]
    rounds = [
        [life[i] for life in lives for i in (0, 1)],
        [life[i] for life in lives for i in (2, 3)],
    ]
    try:
        await bus.ensure_stream()
        for round_ in rounds:
            await bus.publish_many(round_)
    finally:
        await bus.close()
    return [event for round_ in rounds for event in round_]


def _per_workload(shown: list[Any]) -> dict[str, list[str]]:
    """Event ids per workload, in the order shown: the view keeps each workload's events in
    order (copies in the order published, batches family by family within a round)."""
    ids: dict[str, list[str]] = {}
    for item in shown:
        body = item if isinstance(item, dict) else msgspec.to_builtins(item)
        ids.setdefault(body["workload"]["name"], []).append(body["id"])
    return ids


async def _stored_on(bus: Bus, subject: str) -> int:
    info = await bus.js.stream_info(STREAM, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


@pytest.mark.parametrize(
    ("copies", "stored_copies", "reason"),
    [
        (ALL_COPIES, 12, "every copy kept: the CLI reads them by subject"),
        ((), 0, "no copies: the CLI derives the same events from the batches"),
        (("berth.wl.>",), 6, "facts' copies only: the CLI reads the decisions from batches"),
    ],
)
async def test_berth_events_and_describe_show_the_same_events_whatever_copies_are_kept(
    nats_url: str, copies: tuple[str, ...], stored_copies: int, reason: str
) -> None:
    published = await _published(nats_url, copies)
    reader = await connect_open(nats_url, "cli")
    try:
        assert (await reader.view_copies()).copies == copies, "the stream names the copies kept"
        assert (
            await _stored_on(reader, "berth.wl.>") + await _stored_on(reader, "berth.cq.>")
            == stored_copies
        ), reason
        team_a = [e for e in published if e.workload.namespace == "team-a"]
        assert _per_workload(await recorded(reader, TEAM_A)) == _per_workload(team_a), reason
        one = ["berth.wl.*.team-a.c", "berth.cq.*.*.team-a.c"]
        assert [b["id"] for b in await recorded(reader, one)] == [
            e.id for e in published if e.workload.name == "c"
        ], reason
        facts = [e for e in published if subject_for(e).startswith("berth.wl.")]
        assert _per_workload(await recorded(reader, ["berth.wl.>"])) == _per_workload(facts)
    finally:
        await reader.close()


@pytest.mark.parametrize("copies", [ALL_COPIES, ()], ids=["copies", "no-copies"])
async def test_a_fact_reported_again_is_shown_once(nats_url: str, copies: tuple[str, ...]) -> None:
    """A fact reported again in a round of other contents: its batch is not the first's, so
    the stream keeps it, and its copy (no ``Nats-Msg-Id``) is stored again; ``berth events``
    shows it once, from the copies as from the batches."""
    first, again = submitted("a", namespace="team-a"), started("a", namespace="team-a")
    other = submitted("b", namespace="team-a")
    bus = await connect_open(nats_url, "watcher", BusSettings(copies=copies))
    try:
        await bus.ensure_stream()
        await bus.publish_many([first])
        await bus.publish_many([first, other, again])
    finally:
        await bus.close()
    reader = await connect_open(nats_url, "cli")
    try:
        stored = await _stored_on(reader, subject_for(first))
        assert stored == (2 if copies else 0), "each copy stored as sent"
        shown = await recorded(reader, ["berth.wl.*.team-a.a"])
        assert [b["id"] for b in shown] == [first.id, again.id]
    finally:
        await reader.close()


@pytest.mark.parametrize("copies", [ALL_COPIES, ()], ids=["copies", "no-copies"])
async def test_the_consoles_workload_timeline_whatever_copies_are_kept(
    nats_url: str, copies: tuple[str, ...]
) -> None:
    """The console's history of one workload holds its events, in order, once each: from
    the copies by subject, or picked out of the batches."""
    published = await _published(nats_url, copies)
    bus = await connect_open(nats_url, "console")
    try:
        history = await Queries(bus).history("team-a", "a")
    finally:
        await bus.close()
    mine = [e for e in published if e.workload.name == "a"]
    assert [(subject, event.id) for _, subject, event in history] == [
        (subject_for(e), e.id) for e in mine
    ]


def test_a_page_behind_a_batch_partly_pushed_out_reads_its_history_again() -> None:
    """A batch is many events at one sequence: when the ring buffer drops some of them, a
    page that showed up to the sequence before the batch has missed events."""
    model = Model()
    model.recent = type(model.recent)(maxlen=3)
    model.apply_message(1, [(subject_for(e), e) for e in [submitted("z")]])
    batch = [submitted(name) for name in "abcd"]
    model.apply_message(2, [(subject_for(e), e) for e in batch])
    assert [i.event.workload.name for i in model.recent] == ["b", "c", "d"]
    assert model.missed_since(1), "a fell out: the page must read its history again"
    assert not model.missed_since(2), "a page that showed the batch missed nothing"


async def test_the_workload_page_shows_each_event_once(nats_url: str) -> None:
    """The page reads its history from the copies (stored before their batch, at lower
    sequences), while the shared consumer folds the batches: each event shows once."""
    published = await _published(nats_url, ALL_COPIES)
    bus = await connect_open(nats_url, "console")
    model = Model()
    try:
        subscription = await bus.js.subscribe("berth.>", stream=STREAM, ordered_consumer=True)
        while model.seq < (await bus.js.stream_info(STREAM)).state.last_seq:
            msg = await subscription.next_msg(timeout=5)
            events = record_events(msg)
            model.apply_message(msg.metadata.sequence.stream, [(subject_for(e), e) for e in events])
        await subscription.unsubscribe()
        context = Context(model=model, queries=Queries(bus), pending=PendingCache(None))
        view = WorkloadView(context, "team-a", "a")
        timeline = str((await view.snapshot()).regions["timeline"])  # the first: its history
    finally:
        await bus.close()
    mine = [e for e in published if e.workload.name == "a"]
    assert timeline.count("<li") == len(mine), timeline


def test_the_console_folds_every_event_of_a_batch_once() -> None:
    """A batch is one stream sequence holding many events: each is folded (not only the
    first), and the same sequence delivered again changes nothing."""
    model = Model()
    events: list[AnyEvent] = [*_life("team-a", "a")[:2], *_life("team-b", "b")[:2]]
    model.apply_message(7, [(subject_for(e), e) for e in events])
    model.apply_message(7, [(subject_for(e), e) for e in events])
    model.apply_message(8, [])  # a copy: its batch holds its event
    assert sorted(model.workloads.rows) == [("team-a", "a"), ("team-b", "b")]
    assert len(model.recent) == 4 and model.seq == 8


async def test_a_read_only_user_reads_the_derived_view(
    secured_url: str, store: CredentialStore
) -> None:
    """Signed in as the reader, a tool reads the copies setting from the stream and one
    namespace's events from the batches."""
    admission = await connect_as(secured_url, store, "admission", BusSettings(copies=()))
    reader = await connect_as(secured_url, store, "reader")
    try:
        await admission.ensure_stream()
        events = [_life("team-a", "a")[2], _life("team-b", "b")[2]]
        await admission.publish_many(events)
        assert (await reader.view_copies()).copies == ()
        shown = await recorded(reader, ["berth.cq.*.*.team-a.*"])
        assert [b["id"] for b in shown] == [events[0].id], "team-a's admission, not team-b's"
    finally:
        await admission.close()
        await reader.close()


async def test_services_that_disagree_leave_readers_the_batches(nats_url: str) -> None:
    """On a stream an older Berth made (no setting recorded, an operator's own key), a
    watcher that keeps no copies and an admission that keeps them all each record theirs;
    a reader then counts on none and still shows every event, the watcher's facts among
    them."""
    admin = await connect_open(nats_url, "cli")
    await admin.js.add_stream(
        api.StreamConfig(name=STREAM, subjects=list(STREAM_SUBJECTS), metadata={"ops": "kept"})
    )
    published = []
    try:
        for source, copies in (("watcher", ()), ("admission", ALL_COPIES)):
            bus = await connect_open(nats_url, source, BusSettings(copies=copies))
            try:
                await bus.ensure_stream()
                events = _life("team-a", "a")
                mine = events[::3] if source == "watcher" else events[1:3]
                await bus.publish_many(mine)
                published += mine
            finally:
                await bus.close()
        metadata = (await admin.js.stream_info(STREAM)).config.metadata or {}
        assert (metadata["ops"], metadata["berth.copies.watcher"]) == ("kept", "none")
        assert metadata["berth.copies.admission"] == "berth.>"
        assert (await admin.view_copies()).copies == ()
        shown = await recorded(admin, TEAM_A, since=60)
        assert sorted(b["id"] for b in shown) == sorted(e.id for e in published)
    finally:
        await admin.close()
