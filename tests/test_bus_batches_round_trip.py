"""Batches on the bus: the round trip against a real nats-server, secured where
permissions matter (each event handled once despite the copies, stored once when retried)."""

from __future__ import annotations

import asyncio

import msgspec
from nats.aio.msg import Msg

from bench.eventlog import read_events
from shared.auth import CredentialStore
from shared.bus import STREAM
from shared.events import AnyEvent, WorkloadStarted, encode_event, now
from shared.subjects import subject_family
from tests.batched_bus import (
    BATCHES,
    _admitted,
    _connect,
    _evict,
    _pending,
    _ref,
    _replayed,
    _submitted,
)
from tests.conftest import bus_auth, connect_as


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
