"""Fast batches of plain puts (``Bus.send_key_batch``) where the server cannot take them or
answers oddly, against a real nats-server: who may turn a stream to batches and when (the
server's version, ``BERTH_BUS_BATCHES``, a refused or failed update), a leader that answers
as to plain puts, a batch that cannot be sent whole, replies that are not a batch's, and the
watcher's rewrite of unstored statuses, together."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import nats.errors
import pytest
from nats.aio.msg import Msg

import shared.bus.buckets as buckets
from services.watcher.local.statuses import StatusStore, StatusWrites
from shared.bus import AckTimeout, Bucket, Bus, BusError, BusSettings, KeyBatch, KeyUpdates
from shared.bus.acks import _batch_reply
from shared.bus.publishing import BATCH_WRITES
from tests.conftest import bus_auth, captured_logs

# --- replies under the inbox: which end a batch -------------------------------------------

# (token after the inbox prefix, payload, what _batch_reply says, why)
REPLY_CASES: list[tuple[str, bytes, tuple[str, int] | None, str]] = [
    (
        "b-1.500.fail.3.2.$FI",
        b'{"stream":"S","seq":9,"batch":"b-1","count":3}',
        ("b-1", 3),
        "the commit's ack ends the batch, at its place",
    ),
    (
        "b-1.500.fail.2.1.$FI",
        b'{"type":"io.nats.jetstream.api.v1.flow"}',
        ("b-1", 0),
        "flow control does not end it",
    ),
    (
        "b-1.500.fail.2.1.$FI",
        b'{"error":{"code":400}}',
        ("b-1", 0),
        "a mid-batch refusal does not end it (the commit's ack counts)",
    ),
    (
        "b-1.500.fail.1.0.$FI",
        b'{"error":{"code":400}}',
        ("b-1", 1),
        "the first message's refusal ends it (no batch began)",
    ),
    ("b-1.$FI", b"{}", None, "too few tokens: not a batch reply"),
    ("b-1.500.fail.2.1.extra.$FI", b"{}", None, "too many tokens: not a batch reply"),
    ("b-1.500.fail.x.1.$FI", b"{}", None, "a place that is not a number: not a batch reply"),
]


@pytest.mark.parametrize(
    ("token", "data", "expected", "why"), REPLY_CASES, ids=[c[3] for c in REPLY_CASES]
)
def test_which_replies_end_a_batch(
    token: str, data: bytes, expected: tuple[str, int] | None, why: str
) -> None:
    assert _batch_reply(token, data) == expected, why


# --- who turns the stream to batches, and when ---------------------------------------------


@dataclass(frozen=True)
class AskCase:
    why: str
    version: str | None  # the connected server's version as the client reads it (None: real)
    batching: bool  # BusSettings.batching (BERTH_BUS_BATCHES)
    batched: bool  # the puts went as fast batches, and the stream allows them


ASK_CASES = [
    AskCase("A 2.14+ server, batches on: the stream is turned, puts batched.", None, True, True),
    AskCase(
        "A 2.13 server: not asked (older nodes would not load the stream), plain puts.",
        "2.13.4",
        True,
        False,
    ),
    AskCase(
        "A version the client cannot read: not asked, plain puts.", "0.0.0-unknown", True, False
    ),
    AskCase("BERTH_BUS_BATCHES=0: plain puts and the stream left as it is.", None, False, False),
]


@pytest.mark.parametrize("case", ASK_CASES, ids=[c.why for c in ASK_CASES])
async def test_the_stream_is_turned_only_on_a_new_server_with_batches_on(
    nats_url: str, case: AskCase
) -> None:
    settings = BusSettings(batching=case.batching)
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url), settings=settings)
    try:
        server = bus.nc._current_server
        assert server is not None
        if case.version is not None:  # as the server's INFO would say it
            server.server_version = case.version
        kv = await bus.kv("batch-test")
        puts = [(f"k{n}", f"v{n}".encode()) for n in range(5)]
        sent = await bus.send_key_batch(kv, puts)
        outcomes = await sent.outcomes()
        assert isinstance(sent, KeyBatch) == case.batched, case.why
        assert all(not isinstance(o, Exception) for o in outcomes), case.why
        for key, value in puts:
            assert (await kv.get(key)).value == value, case.why
        stream = (await bus.js.stream_info("KV_batch-test")).config
        assert bool(stream.allow_batched) == case.batched, case.why
    finally:
        await bus.close()


@dataclass(frozen=True)
class RefusalCase:
    why: str
    answer: bytes | None  # the stream update's answer (None: none, the request times out)
    asked_again: bool  # asked again once the interval has passed
    batched: bool | None  # Bucket.batched after the failed ask


UPDATE_REFUSALS = [
    RefusalCase(
        "Refused as a bad request (2.12/2.13: strict JSON, unknown field): not asked again,"
        " plain puts for good.",
        b'{"type":"io.nats.jetstream.api.v1.stream_update_response","error":{"code":400,'
        b'"err_code":10025,"description":"invalid JSON: json: unknown field \\"allow_batched\\""}}',
        False,
        False,
    ),
    RefusalCase(
        "Refused as an invalid config (err_code 10052, code 500): not asked again, plain puts"
        " for good.",
        b'{"type":"io.nats.jetstream.api.v1.stream_update_response","error":{"code":500,'
        b'"err_code":10052,"description":"stream configuration invalid"}}',
        False,
        False,
    ),
    RefusalCase(
        "No leader this instant (503): asked again after the interval, plain puts meanwhile.",
        b'{"type":"io.nats.jetstream.api.v1.stream_update_response","error":{"code":503,'
        b'"err_code":10008,"description":"JetStream system temporarily unavailable"}}',
        True,
        None,
    ),
    RefusalCase(
        "No answer (no permission to update, or a timeout): asked again after the interval,"
        " plain puts meanwhile.",
        None,
        True,
        None,
    ),
]


@pytest.mark.parametrize("case", UPDATE_REFUSALS, ids=[c.why for c in UPDATE_REFUSALS])
async def test_a_failed_stream_update_leaves_plain_puts(nats_url: str, case: RefusalCase) -> None:
    """The bucket's JetStream API calls go to a stand-in (its own API prefix) that reads the
    stream's real info and answers the update as the case says; the puts go to the real
    stream. The clock is the test's: the interval passes without waiting for it."""
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        updates: list[bytes] = []

        async def stand_in(msg: Msg) -> None:
            if ".STREAM.INFO." in msg.subject:
                real = await bus.nc.request("$JS.API.STREAM.INFO.KV_batch-test", b"", timeout=2)
                await msg.respond(real.data)
            else:
                updates.append(msg.data)
                if case.answer is not None:
                    await msg.respond(case.answer)

        await bus.nc.subscribe("standin.API.STREAM.>", cb=stand_in)
        kv = await bus.kv("batch-test")
        assert isinstance(kv, Bucket)
        kv.js = bus.nc.jetstream(prefix="standin.API", timeout=0.5)
        now = [100.0]
        kv.clock = lambda: now[0]
        puts = [("a", b"1"), ("b", b"2")]
        asked = []
        for step in ("first write", "within the interval", "after the interval"):
            if step == "after the interval":
                now[0] += kv.batches_asked_every
            sent = await bus.send_key_batch(kv, puts)
            assert isinstance(sent, KeyUpdates), f"{case.why} ({step}): plain puts"
            assert all(isinstance(o, int) for o in await sent.outcomes()), case.why
            asked.append(len(updates))
            assert kv.batched is case.batched, case.why
        assert asked == [1, 1, 2 if case.asked_again else 1], case.why
        assert b'"allow_batched": true' in updates[0], "the update asked for batches"
    finally:
        await bus.close()


# --- a leader that answers as to plain puts ------------------------------------------------


async def test_a_leader_older_than_batches_answers_plain_acks(nats_url: str) -> None:
    """A stream leader older than 2.14 (a rolling upgrade) stores each message of a batch as
    a plain put and answers each with a plain ack. Played by a subscriber answering so: the
    first put is stored, the others to be written again, the bucket's later writes plain
    puts, logged once."""
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        seq = [0]

        async def old_leader(msg: Msg) -> None:
            seq[0] += 1
            await msg.respond(f'{{"stream":"KV_batch-test","seq":{seq[0]}}}'.encode())

        await bus.nc.subscribe("old.leader.>", cb=old_leader)
        kv = await bus.kv("batch-test")
        assert isinstance(kv, Bucket)
        kv.batched = True
        keys = ["a", "b", "c"]
        with captured_logs(buckets) as logs:
            for _ in range(2):
                futures = await bus.acks.send_batches([[(f"old.leader.{k}", b"v") for k in keys]])
                sent = KeyBatch(kv, keys, [(len(keys), futures[0])])
                outcomes = await sent.outcomes()
                assert outcomes[0] is None, "the first put was stored, as a plain put"
                assert all(isinstance(o, AckTimeout) for o in outcomes[1:]), "written again"
        assert kv.batched is False, "the bucket's later writes are plain puts"
        assert [e["event"] for e in logs].count("bucket_batches_stopped") == 1
        assert isinstance(await bus.send_key_batch(kv, [("a", b"v")]), KeyUpdates)
    finally:
        await bus.close()


# --- batches that cannot be sent ------------------------------------------------------------


async def test_a_batch_unsent_midway_leaves_no_ack_waited_for(nats_url: str) -> None:
    """The second batch of a call cannot be sent (a value over the server's max payload):
    the call raises, and the first batch's ack is not waited for (its outcome never
    retrieved would be logged as such once it times out)."""
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        kv = await bus.kv("batch-test")
        puts = [(f"k{n}", b"v") for n in range(BATCH_WRITES)]
        puts.append(("huge", b"x" * (bus.nc.max_payload + 1)))
        [warm] = await (await bus.send_key_batch(kv, [("warm", b"w")])).outcomes()
        assert warm is None
        with pytest.raises(BusError) as raised:  # the bus's own error, nats-py's as its cause
            await bus.send_key_batch(kv, puts)
        assert isinstance(raised.value.__cause__, nats.errors.MaxPayloadError)
        assert not bus.acks._pending, "no ack of that call is waited for"
    finally:
        await bus.close()


@pytest.mark.parametrize(
    ("send", "why"),
    [
        (lambda bus, kv: bus.acks.send_batches([[]]), "an empty batch has no commit: refused"),
        (lambda bus, kv: bus.acks.send_batches([[("x", b"1")], []]), "one empty among others"),
    ],
    ids=["empty batch", "an empty one among others"],
)
async def test_an_empty_batch_is_refused(
    nats_url: str, send: Callable[[Bus, Any], Awaitable[Any]], why: str
) -> None:
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        with pytest.raises(ValueError):
            await send(bus, None)
        assert not bus.acks._pending, why
    finally:
        await bus.close()


async def test_no_puts_send_nothing_and_ask_nothing(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        kv = await bus.kv("batch-test")
        sent = await bus.send_key_batch(kv, [])
        assert await sent.outcomes() == []
        stream = (await bus.js.stream_info("KV_batch-test")).config
        assert not stream.allow_batched, "the stream was not asked to change"
    finally:
        await bus.close()


# --- the watcher's rewrite of unstored statuses ---------------------------------------------


class Reported:
    """What a settle reads as its writes' outcomes: the case's (a gap, a refusal), standing
    in for a batch's ack; the rewrites that follow go to the real stream."""

    def __init__(self, outcomes: list[Exception | None]) -> None:
        self._outcomes = outcomes

    async def outcomes(self) -> list[Exception | None]:
        return self._outcomes


@dataclass(frozen=True)
class SettleCase:
    why: str
    reported: str  # per write: S stored, T not known stored, R refused (BusError)
    stream_off: bool  # the stream stopped taking batches (the bucket does not know yet)
    forgotten: int | None  # a write whose key is forgotten before the settle
    raises: bool


SETTLE_CASES = [
    SettleCase(
        "A gap at the second write: every later one is rewritten together, not one by one.",
        "S" + "T" * 49,
        False,
        None,
        False,
    ),
    SettleCase(
        "The stream stopped taking batches: the rewrite's batch is refused, and the next"
        " round goes as plain puts, together.",
        "T" * 20,
        True,
        None,
        False,
    ),
    SettleCase(
        "A forgotten key is not written again (its status is gone).", "TTTT", False, 2, False
    ),
    SettleCase("A write's own refusal fails the round.", "STRT", False, None, True),
]


@pytest.mark.parametrize("case", SETTLE_CASES, ids=[c.why for c in SETTLE_CASES])
async def test_unstored_statuses_are_written_again_together(
    nats_url: str, case: SettleCase
) -> None:
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    try:
        kv = await bus.kv("status-test")
        assert isinstance(kv, Bucket)
        keys = [f"ns.job-{n}" for n in range(len(case.reported))]
        objects = {key: {"metadata": {"uid": f"u-{key}"}} for key in keys}
        store = StatusStore(objects)
        store.open(bus, kv, asyncio.Event())
        await store.settle(await store.send([(key, {"phase": "Running"}) for key in keys]))
        if case.stream_off:
            config = (await bus.js.stream_info(kv.stream)).config
            config.allow_batched = False
            await bus.js.update_stream(config)
        for key in keys:  # newer statuses than the writes the case reports on
            store.statuses[key] = {**store.statuses[key], "phase": "Succeeded"}
        if case.forgotten is not None:
            store.statuses.pop(keys[case.forgotten])
        letters = {"S": None, "T": AckTimeout("gap"), "R": BusError("refused")}
        writes = StatusWrites()
        writes.values = [(key, b"{}") for key in keys]
        writes.sent = Reported([letters[letter] for letter in case.reported])  # type: ignore[assignment]
        one_by_one: list[str] = []
        put = kv.put

        async def counted(key: str, value: bytes, validate_keys: bool = True) -> int:
            one_by_one.append(key)
            return await put(key, value, validate_keys)

        kv.put = counted  # type: ignore[method-assign]
        if case.raises:
            with pytest.raises(BusError):
                await store.settle(writes)
            return
        await store.settle(writes)
        assert one_by_one == [], f"{case.why}: rewritten one put at a time: {one_by_one}"
        for key, letter in zip(keys, case.reported, strict=True):
            value = (await kv.get(key)).value
            assert value is not None
            phase = msgspec.json.decode(value)["phase"]
            newest = letter == "T" and key in store.statuses
            assert phase == ("Succeeded" if newest else "Running"), f"{case.why}: {key}"
    finally:
        await bus.close()
