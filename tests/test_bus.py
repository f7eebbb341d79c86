"""The bus against a real nats-server: ids dedupe, batches ack, bad messages never loop."""

import asyncio
import time
from collections.abc import Awaitable

import nats.errors
import nats.js.errors
import pytest
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.kv import KeyValue
from prometheus_client import REGISTRY

from berth_cli.natsserver import NatsServer
from shared.bus import (
    STREAM,
    BucketNotFound,
    BucketWatch,
    Bus,
    BusError,
    BusTimeout,
    KeyExists,
    KeyNotFound,
    NoResponders,
    NotFound,
    Refused,
    consuming,
    translated,
    watching,
)
from shared.bus.acks import AckTimeout, AckTracker, PublishRefused
from shared.bus.settings import BusSettings
from shared.events import AnyEvent, PodSet, WorkloadRef, WorkloadSubmitted, now
from tests.conftest import ack_floor, acked_up_to, bus_auth

MESSAGES_READ = "berth_bus_messages_read_total"


def _submitted(index: int) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        id=f"submitted-u{index}",
        source="test",
        workload=WorkloadRef("default", f"job-{index}", f"u{index}"),
        kind="Job",
        queue_name="user-queue",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=now(),
    )


async def _consume_until(
    bus: Bus, subscription: JetStreamContext.PullSubscription, count: int
) -> list[str]:
    """Consume until ``count`` events were handled; their uids (the acks may still be on
    their way: ``acked_up_to``)."""
    handled: list[str] = []
    stop = asyncio.Event()

    async def handler(events: list[AnyEvent]) -> None:
        handled.extend(e.workload.uid for e in events)
        if len(handled) >= count:
            stop.set()

    await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
    return handled


async def _bus(url: str) -> Bus:
    """A bus publishing one message per event: the path of the CLI's commands and of
    BERTH_BUS_BATCHES=0, whose message-level mechanics these tests count (the batched path:
    tests/test_bus_batches.py)."""
    bus = await Bus.connect(
        url, source="test", auth=bus_auth(url), settings=BusSettings(batching=False)
    )
    await bus.ensure_stream()
    return bus


async def test_same_id_is_stored_once(nats_url: str) -> None:
    """Publishing an event again with the same id (a retry) stores it only once."""
    bus = await _bus(nats_url)
    try:
        events = [_submitted(i) for i in range(50)]
        await bus.publish_many(events)
        await bus.publish_many(events[:10])
        ack = await bus.publish(events[0])
        assert ack.duplicate
        assert await bus.last_sequence() == 50
    finally:
        await bus.close()


async def test_consumer_resumes_where_it_acked(nats_url: str) -> None:
    """A durable consumer that restarts gets only what it had not acked."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(20)])
        seen: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            seen.extend(e.workload.uid for e in events)
            if len(seen) >= 20:
                stop.set()

        subscription = await bus.durable_subscription("t", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        await subscription.unsubscribe()
        await bus.publish_many([_submitted(i) for i in range(20, 25)])
        stop.clear()
        seen.clear()

        async def rest(events: list[AnyEvent]) -> None:
            seen.extend(e.workload.uid for e in events)
            if len(seen) >= 5:
                stop.set()

        again = await bus.durable_subscription("t", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(again, rest, stopping=stop), 10)
        assert seen == [f"u{i}" for i in range(20, 25)]
    finally:
        await bus.close()


async def test_failed_handler_is_redelivered(nats_url: str) -> None:
    """A batch whose handler raised is not acked: it is handled again, then acked."""
    bus = await _bus(nats_url)
    try:
        await bus.publish(_submitted(1))
        attempts = 0
        stop = asyncio.Event()

        async def flaky(events: list[AnyEvent]) -> None:
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                raise RuntimeError("boom")
            stop.set()

        subscription = await bus.durable_subscription("flaky", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, flaky, stopping=stop), 15)
        assert attempts == 2
        info = await acked_up_to(bus, "flaky", 1)
        assert info.num_ack_pending == 0 and ack_floor(info) == 1
    finally:
        await bus.close()


async def test_malformed_message_is_dropped_not_looped(nats_url: str) -> None:
    """Garbage on an event subject is skipped (acked past); the good event after it is handled
    once."""
    bus = await _bus(nats_url)
    try:
        await bus.js.publish("berth.wl.submitted.default.x", b'{"type":"Nope"}')
        await bus.publish(_submitted(2))
        subscription = await bus.durable_subscription("m", ["berth.wl.>"])
        handled = await _consume_until(bus, subscription, 1)
        info = await acked_up_to(bus, "m", 2)
        assert handled == ["u2"]
        assert info.num_ack_pending == 0 and info.num_pending == 0
        assert ack_floor(info) == 2
    finally:
        await bus.close()


async def test_close_after_idle_fetches_is_prompt(nats_url: str) -> None:
    """Closing after fetches timed out does not hang for drain's 30 s timeout."""
    bus = await _bus(nats_url)
    subscription = await bus.durable_subscription("idle", ["berth.wl.>"])
    with pytest.raises(TimeoutError):
        await subscription.fetch(1, timeout=0.2)
    started = time.monotonic()
    await bus.close()
    assert time.monotonic() - started < 3


async def test_replay_reads_from_the_first_event(nats_url: str) -> None:
    """A replay consumer sees every stored event, oldest first."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(30)])
        subscription = await bus.replay_subscription(["berth.wl.>"])
        messages = await subscription.fetch(100, timeout=1)
        assert len(messages) == 30
        assert messages[-1].metadata.num_pending == 0
    finally:
        await bus.close()


async def test_lost_compare_and_swap_fails_at_once(nats_url: str) -> None:
    """A pipelined key update against a stale revision raises, promptly (nats-py's own
    publish_async left such a future unresolved), and a fresh one goes through."""
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("swap-test")
        first = await kv.put("key", b"one")
        second = await bus.update_key(kv, "key", b"two", last=first)
        assert second > first and (await kv.get("key")).value == b"two"
        started = time.monotonic()
        with pytest.raises(KeyExists):
            await bus.update_key(kv, "key", b"stale", last=first)
        assert time.monotonic() - started < 1
        assert (await kv.get("key")).value == b"two"
    finally:
        await bus.close()


async def test_a_plain_key_update_is_stored_as_kv_put_stores_it(nats_url: str) -> None:
    """A pipelined update without a revision to swap (the watcher's statuses) is a plain
    message, headers and all, as nats-py's kv.put writes it, and reads back the same."""
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("plain-test")
        await kv.put("by-put", b"one")
        [revision] = await (
            await bus.send_key_updates(kv, [("by-update", b"two", None)])
        ).outcomes()
        assert isinstance(revision, int) and (await kv.get("by-update")).value == b"two"
        stored = [
            await bus.js.get_last_msg("KV_plain-test", f"$KV.plain-test.{key}")
            for key in ("by-put", "by-update")
        ]
        assert (stored[0].hdrs, stored[0].headers) == (stored[1].hdrs, stored[1].headers)
    finally:
        await bus.close()


async def test_unanswered_publish_times_out(nats_url: str) -> None:
    """A publish nobody acks (a plain subscriber, not a stream) fails with AckTimeout after
    the tracker's timeout instead of waiting forever; one with no listener at all is refused."""
    bus = await _bus(nats_url)
    try:
        silent = await bus.nc.subscribe("silent.subject")
        tracker = AckTracker(bus.nc, timeout=0.3)
        future = await tracker.send("silent.subject", b"x", {})
        with pytest.raises(AckTimeout):
            await asyncio.wait_for(future, 3)
        nobody = await tracker.send("nobody.listens", b"x", {})
        with pytest.raises(PublishRefused) as refused:
            await asyncio.wait_for(nobody, 3)
        assert refused.value.code == 503
        await tracker.close()
        await silent.unsubscribe()
    finally:
        await bus.close()


async def test_consumer_is_sent_only_its_subjects(nats_url: str) -> None:
    """The server filters a consumer's subjects: an event on another subject is never sent
    to it (not only dropped here), yet acking past it leaves nothing pending."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(5)])
        await bus.js.publish("berth.cmd.other.default.x", b"not even an event")
        await bus.publish(_submitted(5))
        subscription = await bus.durable_subscription("only-wl", ["berth.wl.>"])
        handled = await _consume_until(bus, subscription, 6)
        info = await acked_up_to(bus, "only-wl", await bus.last_sequence())
        assert handled == [f"u{i}" for i in range(6)]
        assert info.num_ack_pending == 0 and info.num_pending == 0
        sent = {"consumer": "only-wl", "stage": "delivered"}
        assert REGISTRY.get_sample_value(MESSAGES_READ, {**sent, "subject": "wl.submitted"}) == 6
        assert REGISTRY.get_sample_value(MESSAGES_READ, {**sent, "subject": "cmd.other"}) is None
    finally:
        await bus.close()


async def test_refilter_changes_what_is_sent_from_the_next_message(nats_url: str) -> None:
    """A replay consumer refiltered mid-stream keeps its place: what it was sent stays, and
    from then on the server sends only the new subjects (admission's deciding leader is not
    sent its own admissions this way)."""
    bus = await _bus(nats_url)
    try:
        for i in range(4):
            await bus.publish(_submitted(i))
            await bus.js.publish(f"berth.cmd.create.default.c{i}", b"{}")
        subscription = await bus.replay_subscription(["berth.wl.>", "berth.cmd.>"])
        first = await subscription.fetch(4, timeout=1)
        assert await bus.refilter(subscription, ["berth.wl.>"]), "other filters: changed"
        assert not await bus.refilter(subscription, ["berth.wl.>"]), "the server's: unchanged"
        rest = await subscription.fetch(100, timeout=1)
        assert [m.subject.split(".")[1] for m in first] == ["wl", "cmd", "wl", "cmd"]
        assert [m.subject for m in rest] == [f"berth.wl.submitted.default.job-{i}" for i in (2, 3)]
    finally:
        await bus.close()


async def test_one_ack_covers_a_batch_and_a_failure_is_never_covered(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable consumers ack all up to a message. An event whose handler keeps failing is
    retried, then dropped with a log line; the events around it are handled, each once."""
    monkeypatch.setattr(consuming, "HANDLER_ATTEMPTS", 2)
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(10)])
        handled: list[str] = []
        tries_of_poison = 0
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            nonlocal tries_of_poison
            if any(e.workload.uid == "u4" for e in events):
                tries_of_poison += 1
                raise RuntimeError("poison")
            handled.extend(e.workload.uid for e in events)
            if len(handled) >= 9:
                stop.set()

        subscription = await bus.durable_subscription("poison", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 15)
        info = await acked_up_to(bus, "poison", 10)
        assert info.config.ack_policy == AckPolicy.ALL
        assert sorted(handled) == sorted(f"u{i}" for i in range(10) if i != 4)
        assert tries_of_poison == 2 + 3  # the batch twice, then the event alone three times
        assert info.num_ack_pending == 0 and ack_floor(info) == 10
    finally:
        await bus.close()


async def test_consumer_with_explicit_acks_is_recreated_where_it_was(nats_url: str) -> None:
    """A durable consumer made by an older Berth (one ack per message) resumes after what it
    had acked, under the new ack policy."""
    bus = await _bus(nats_url)
    try:
        await bus.publish_many([_submitted(i) for i in range(6)])
        await bus.js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name="old", ack_policy=AckPolicy.EXPLICIT, filter_subject="berth.wl.>"
            ),
        )
        old = await bus.js.pull_subscribe_bind("old", stream=STREAM)
        for msg in await old.fetch(4, timeout=5):
            await msg.ack_sync()
        await old.unsubscribe()
        subscription = await bus.durable_subscription("old", ["berth.wl.>"])
        handled = await _consume_until(bus, subscription, 2)
        assert handled == ["u4", "u5"]
        info = await bus.js.consumer_info(STREAM, "old")
        assert info.config.ack_policy == AckPolicy.ALL
    finally:
        await bus.close()


async def test_a_batch_left_settling_is_acked_only_once_settled(nats_url: str) -> None:
    """A handler may return what it still has in flight: the next batch is handed over at
    once, and nothing is acked past a batch that has not settled."""
    bus = await _bus(nats_url)
    try:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handled: list[str] = []
        arrived = asyncio.Event()
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> Awaitable[None] | None:
            handled.extend(e.workload.uid for e in events)
            arrived.set()
            return gate if handled == ["u0"] else None

        subscription = await bus.durable_subscription("settling", ["berth.wl.>"])
        consuming = asyncio.create_task(bus.consume(subscription, handler, stopping=stop))
        await bus.publish(_submitted(0))
        await asyncio.wait_for(arrived.wait(), 5)
        arrived.clear()
        await bus.publish(_submitted(1))
        await asyncio.wait_for(arrived.wait(), 5)  # handed over while the first still settles
        assert handled == ["u0", "u1"]
        await asyncio.sleep(0.3)  # room for an ack that must not come
        assert ack_floor(await bus.js.consumer_info(STREAM, "settling")) == 0
        gate.set_result(None)
        assert ack_floor(await acked_up_to(bus, "settling", 2)) == 2
        stop.set()
        await asyncio.wait_for(consuming, 5)
    finally:
        await bus.close()


async def test_a_batch_whose_settling_failed_is_handled_again(nats_url: str) -> None:
    bus = await _bus(nats_url)
    try:
        calls = 0
        stop = asyncio.Event()

        async def fails_once() -> None:
            raise RuntimeError("write lost")

        async def handler(events: list[AnyEvent]) -> Awaitable[None] | None:
            nonlocal calls
            calls += 1
            if calls == 1:
                return fails_once()
            stop.set()
            return None

        await bus.publish(_submitted(0))
        subscription = await bus.durable_subscription("resettle", ["berth.wl.>"])
        await asyncio.wait_for(bus.consume(subscription, handler, stopping=stop), 10)
        assert calls == 2
        assert ack_floor(await acked_up_to(bus, "resettle", 1)) == 1
    finally:
        await bus.close()


async def test_a_stop_ends_the_wait_for_the_next_batch_at_once(nats_url: str) -> None:
    """On SIGTERM the runtime interrupts the bus's waits: a loop waiting for its next batch
    returns now, not at the end of its idle timeout (30 s here), and waits no more after."""
    bus = await _bus(nats_url)
    try:
        subscription = await bus.durable_subscription("stopping", ["berth.wl.>"])
        assert await bus.next_batch(subscription, wait=0.0) == []
        waiting = asyncio.create_task(bus.next_batch(subscription, wait=30.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        bus.interrupt_waits()
        assert await asyncio.wait_for(waiting, 5) == []
        assert await asyncio.wait_for(bus.next_batch(subscription, wait=30.0), 5) == []
    finally:
        await bus.close()


@pytest.mark.parametrize("follow", ["follow", "follow_batches"])
async def test_a_stop_ends_a_bucket_follow_at_once(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, follow: str
) -> None:
    """A follow loop ends as soon as its stop flag is set, whatever its idle timeout."""
    monkeypatch.setattr(watching, "WATCH_IDLE_TIMEOUT_S", 30.0)
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("follow-test")
        await kv.put("a", b"1")
        watch, initial = await BucketWatch.start(kv)
        assert [entry.key for entry in initial] == ["a"]
        seen: list[str] = []
        changed = asyncio.Event()

        async def handle_one(entry: KeyValue.Entry) -> None:
            seen.append(entry.key)
            changed.set()

        async def handle_many(entries: list[KeyValue.Entry]) -> None:
            seen.extend(entry.key for entry in entries)
            changed.set()

        stopping = asyncio.Event()
        handler = handle_one if follow == "follow" else handle_many
        task = asyncio.create_task(getattr(watch, follow)(handler, stopping=stopping))
        await kv.put("b", b"2")
        await asyncio.wait_for(changed.wait(), 5)
        assert seen == ["b"]
        stopping.set()
        await asyncio.wait_for(task, 5)
    finally:
        await bus.close()


async def test_a_bucket_watch_resumes_after_nats_restarts(nats_server: NatsServer) -> None:
    """A watch whose server restarted (its consumer gone with it) hands over the changes made
    after the restart, each once: it resumes after the last revision it saw, not from the
    bucket's current values again."""
    bus = await _bus(nats_server.url)
    try:
        kv = await bus.kv("resume-test")
        await kv.put("a", b"1")
        watch, initial = await BucketWatch.start(kv)
        assert [entry.key for entry in initial] == ["a"]
        seen: list[str] = []
        changed = asyncio.Event()

        async def handle(entry: KeyValue.Entry) -> None:
            seen.append(entry.key)
            changed.set()

        stopping = asyncio.Event()
        task = asyncio.create_task(watch.follow(handle, stopping=stopping))
        await kv.put("b", b"2")
        await asyncio.wait_for(changed.wait(), 5)
        changed.clear()
        nats_server.stop()
        nats_server.start()
        for _ in range(100):  # until JetStream is back
            try:
                await kv.put("c", b"3")
                break
            except (BusError, TimeoutError):
                await asyncio.sleep(0.1)
        await asyncio.wait_for(changed.wait(), 15)
        await asyncio.sleep(0.2)  # room for a copy of "a" or "b", which must not come
        assert seen == ["b", "c"]
        stopping.set()
        await asyncio.wait_for(task, 5)
    finally:
        await bus.close()


TRANSLATIONS = [
    (nats.js.errors.KeyWrongLastSequenceError(), KeyExists, "a compare-and-swap lost"),
    (nats.js.errors.KeyNotFoundError(), KeyNotFound, "no such key"),
    (nats.js.errors.KeyDeletedError(), KeyNotFound, "a deleted key is not found either"),
    (nats.js.errors.NoKeysError(), KeyNotFound, "a bucket with no key at all"),
    (nats.js.errors.BucketNotFoundError(), BucketNotFound, "no such bucket"),
    (nats.js.errors.NotFoundError(), NotFound, "no such stream, consumer or message"),
    (nats.errors.NoRespondersError(), NoResponders, "nobody serves the subject"),
    (nats.js.errors.ServiceUnavailableError(), NoResponders, "JetStream has no leader yet"),
    (nats.errors.TimeoutError(), BusTimeout, "nats-py's timeout"),
    (TimeoutError(), BusTimeout, "asyncio's timeout around a call"),
    (nats.js.errors.BadRequestError(), Refused, "JetStream said no"),
    (nats.errors.ConnectionClosedError(), BusError, "anything else nats-py raises"),
]


@pytest.mark.parametrize(("error", "family", "reason"), TRANSLATIONS)
def test_nats_errors_leave_the_bus_as_its_own(
    error: Exception, family: type[BusError], reason: str
) -> None:
    """Each nats-py error becomes the most specific error of the bus's family, the original
    chained as its cause."""
    with pytest.raises(family) as raised, translated():
        raise error
    assert type(raised.value) is family, reason
    assert raised.value.__cause__ is error


async def test_buckets_and_requests_raise_the_family(nats_url: str) -> None:
    """Against a real server: a missing key, a create of an existing key, a missing bucket
    and a request nobody serves each raise the bus's error, not nats-py's."""
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("family-test")
        with pytest.raises(KeyNotFound):
            await kv.get("absent")
        await kv.create("k", b"1")
        with pytest.raises(KeyExists):
            await kv.create("k", b"2")
        with pytest.raises(KeyExists):
            await kv.update("k", b"3", last=999)
        with pytest.raises(BucketNotFound):
            await bus.existing_kv("never-made")
        with pytest.raises(NoResponders):
            await bus.request("berth.api.nobody.here", b"{}", wait=1.0)
    finally:
        await bus.close()
