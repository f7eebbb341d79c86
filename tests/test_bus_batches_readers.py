"""Batches on the bus against a real nats-server: what each reader is sent (a stream
written before batches, pending reports by publisher) and how its reads are counted."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from prometheus_client import REGISTRY

from services.admission.reading import FOLDED_SUBJECTS, deciding_subjects
from services.preemption.service import folded_subjects
from services.recovery.service import subjects_for
from shared.auth import ClientAuth
from shared.bus import STREAM, Bus
from shared.bus.settings import BusSettings
from shared.events import AnyEvent, WorkloadPending, WorkloadStarted
from tests.batched_bus import _admitted, _connect, _evict, _pending, _ref, _replayed, _submitted

MESSAGES_READ = "berth_bus_messages_read_total"


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
