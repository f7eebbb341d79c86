"""Plain puts as JetStream fast batches (``Bus.send_key_batch``, ``AckTracker.send_batches``)
against a real nats-server: one ack per batch, what the stream stores or refuses and what the
caller is told, the watcher's own credentials, and a 3-node cluster whose stream leader
changes while batches are in flight."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from berth_cli.nats_cluster import nats_nodes, wait_for_jetstream
from shared.auth import ClientAuth, CredentialStore
from shared.bus import (
    STATUS_BUCKET,
    AckTimeout,
    Bucket,
    Bus,
    BusError,
    BusSettings,
    BusTimeout,
    NoResponders,
    bus_call,
)
from shared.bus.acks import AckTracker, PublishRefused
from shared.bus.publishing import BATCH_WRITES, KeyBatch
from tests.conftest import bus_auth, connect_as

SMALL = 64  # the stream's largest message in the cases that refuse one
TOO_BIG = b"x" * (SMALL * 2)


@dataclass(frozen=True)
class Case:
    why: str
    puts: int
    too_big_at: int | None  # the put (from 1) whose value the stream refuses, if any
    disabled: bool  # the stream's allow_batched turned off after the bucket was opened
    outcomes: str  # per put: S stored, T write again (AckTimeout), R refused (BusError)
    acks: int  # replies other than flow control: a refused message's, the commit's ack,
    # and "unknown batch" for each message after the batch ended


CASES = [
    Case("Puts in one batch are stored, with one ack for all.", 5, None, False, "SSSSS", 1),
    Case(
        "More puts than a batch holds go as batches, each with its ack.",
        BATCH_WRITES + 2,
        None,
        False,
        "S" * (BATCH_WRITES + 2),
        2,
    ),
    Case(
        "A put the stream refuses mid-batch ends the batch: those before it are stored, it"
        " and those after it are to be written again.",
        5,
        3,
        False,
        "SSTTT",
        3,
    ),
    Case(
        "A first put refused is refused as a plain put would be; the rest, unsent, are to"
        " be written again.",
        4,
        1,
        False,
        "RTTT",
        4,
    ),
    Case(
        "A stream that no longer takes batches: every put is to be written again (and the"
        " bucket's next writes are plain puts).",
        3,
        None,
        True,
        "TTT",
        3,
    ),
]


def _letter(outcome: Exception | int | None) -> str:
    if isinstance(outcome, AckTimeout):
        return "T"
    return "R" if isinstance(outcome, BusError) else "S"


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
async def test_puts_as_fast_batches_per_case(nats_url: str, case: Case) -> None:
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        kv = await bus.kv("batch-test")
        assert isinstance(kv, Bucket)
        [warm] = await (await bus.send_key_batch(kv, [("warm", b"w")])).outcomes()
        assert warm is None and kv.batched, "the bucket's stream was turned to batches"
        config = (await bus.js.stream_info(kv.stream)).config
        assert config.allow_batched
        if case.too_big_at is not None:
            config.max_msg_size = SMALL
        config.allow_batched = not case.disabled
        await bus.js.update_stream(config)
        acks: list[bytes] = []

        async def spy(msg: Msg) -> None:
            if not msg.data.startswith(b'{"type":'):
                acks.append(msg.data)

        await bus.nc.subscribe(bus.acks.prefix + ">", cb=spy)
        puts = [
            (f"k{n}", TOO_BIG if n == case.too_big_at else f"v{n}".encode())
            for n in range(1, case.puts + 1)
        ]
        sent = await bus.send_key_batch(kv, puts)
        assert isinstance(sent, KeyBatch)
        outcomes = await sent.outcomes()
        await bus.nc.flush()
        assert "".join(map(_letter, outcomes)) == case.outcomes, case.why
        for (key, value), letter in zip(puts, case.outcomes, strict=True):
            stored = await kv.get(key) if letter == "S" else None
            assert stored is None or stored.value == value, case.why
        replies = await _settled(acks)
        assert replies == case.acks, f"{case.why}: {acks}"
        if case.disabled:
            assert kv.batched is False
            again = await (await bus.send_key_batch(kv, puts)).outcomes()
            assert all(isinstance(o, int) for o in again), "plain puts, stored"
    finally:
        await bus.close()


async def _settled(replies: list[bytes]) -> int:
    """How many replies came, once no more come (a refused batch's later messages are
    answered too: those count, and the case's figure says so)."""
    count = -1
    while count != len(replies):
        count = len(replies)
        await asyncio.sleep(0.2)
    return count


# (destination, outcome, why)
UNACKED_CASES = [
    ("silent.subject", AckTimeout, "a subscriber that never acks: the outcome is unknown"),
    ("nobody.listens", PublishRefused, "no stream and no subscriber: refused (no responders)"),
]


@pytest.mark.parametrize(
    ("subject", "raised", "why"), UNACKED_CASES, ids=[c[2] for c in UNACKED_CASES]
)
async def test_an_unanswered_batch_fails_as_one_publish_does(
    nats_url: str, subject: str, raised: type[Exception], why: str
) -> None:
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        await bus.nc.subscribe("silent.subject")
        tracker = AckTracker(bus.nc, timeout=0.3)
        [future] = await tracker.send_batches([[(subject, b"x")] * 3])
        with pytest.raises(raised):
            await asyncio.wait_for(future, 3)
        await tracker.close()
    finally:
        await bus.close()


async def test_the_watcher_batches_its_statuses_under_its_own_permissions(
    secured_url: str, store: CredentialStore
) -> None:
    """The watcher's credentials let it turn its bucket to batches (a stream update) and
    read the batch's replies (its inbox): nothing new to allow."""
    bus = await connect_as(secured_url, store, "watcher")
    try:
        kv = await bus.kv(STATUS_BUCKET)
        puts = [(f"ns.job-{n}", b"{}") for n in range(10)]
        sent = await bus.send_key_batch(kv, puts)
        assert isinstance(sent, KeyBatch), "batched, not plain puts"
        assert await sent.outcomes() == [None] * len(puts)
        assert (await bus.js.stream_info(f"KV_{STATUS_BUCKET}")).config.allow_batched
    finally:
        await bus.close()


# Rounds of the leader-change test at most: 3, and more until one catches batches in flight.
STEPDOWN_ROUNDS = 10


async def test_a_stream_leader_change_mid_batch_loses_no_put(
    tmp_path: Path, store: CredentialStore
) -> None:
    """On a 3-node cluster (the bucket with 3 copies), the status bucket's leader steps down
    while batches are in flight. Every put is stored or said to be written again; written
    again as ``StatusStore`` does, none is lost (one may be stored twice). At least one put
    is caught by a leader change (rounds go on until one is, bounded), so that the test
    cannot pass with every batch acked before its leader changed."""
    nodes = nats_nodes(
        data_dir=tmp_path, creds_dir=tmp_path / "creds", count=3, port=0, preexec_fn=None
    )
    for node in nodes:
        node.start()
    try:
        url = ",".join(node.url for node in nodes)
        admin_auth = ClientAuth(seed=store.seed_path("admin"))
        await asyncio.to_thread(wait_for_jetstream, url, admin_auth, replicas=3, timeout=30)
        settings = BusSettings(stream_replicas=3)
        bus = await Bus.connect(
            url,
            source="watcher",
            auth=ClientAuth(seed=store.seed_path("watcher")),
            settings=settings,
        )
        admin = await Bus.connect(url, source="admin", auth=admin_auth, settings=settings)
        try:
            kv = await bus.kv(STATUS_BUCKET)
            assert isinstance(kv, Bucket) and await kv.allow_batches()
            stream = f"KV_{STATUS_BUCKET}"
            leaders = {(await admin.js.stream_info(stream)).cluster.leader}  # type: ignore[union-attr]
            caught = 0  # puts a leader change left unstored (AckTimeout), over all rounds
            for round_ in range(STEPDOWN_ROUNDS):
                if round_ >= 3 and caught:
                    break
                puts = [(f"ns.job-{n}", f"r{round_}".encode()) for n in range(BATCH_WRITES * 2)]
                stepdown = asyncio.create_task(
                    admin.nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
                )
                sent = await bus.send_key_batch(kv, puts)
                assert isinstance(sent, KeyBatch), "batches, not plain puts"
                outcomes = await sent.outcomes()
                await stepdown
                for (key, value), outcome in zip(puts, outcomes, strict=True):
                    assert outcome is None or isinstance(outcome, AckTimeout), outcome
                    if outcome is not None:
                        caught += 1
                        await _put_until_stored(kv, key, value)
                for key, value in puts:
                    assert await _read(kv, key) == value, f"round {round_}: {key} lost"
                leaders.add(await _leader(admin, stream))
            assert len(leaders) > 1, "the leader changed"
            assert caught, "a leader change caught batches in flight (else the test proved nothing)"
        finally:
            await bus.close()
            await admin.close()
    finally:
        for node in nodes:
            node.stop()


async def _leader(bus: Bus, stream: str) -> str:
    for _ in range(100):
        try:
            cluster = (await bus_call(bus.js.stream_info(stream))).cluster
        except (BusTimeout, NoResponders):
            cluster = None  # electing its leader
        if cluster is not None and cluster.leader:
            return cluster.leader
        await asyncio.sleep(0.1)
    raise AssertionError("no leader")


async def _read(kv: Bucket, key: str) -> bytes | None:
    """The key's value, read again while the stream elects its leader (no answer, or 503:
    no leader yet)."""
    for _ in range(100):
        try:
            return (await kv.get(key)).value
        except (BusTimeout, NoResponders):
            await asyncio.sleep(0.1)
    raise AssertionError(f"{key} never read")


async def _put_until_stored(kv: object, key: str, value: bytes) -> None:
    """As ``StatusStore._rewrite``: a put refused while the stream elects its leader is
    tried again."""
    assert isinstance(kv, Bucket)
    for _ in range(100):
        try:
            await kv.put(key, value)
            return
        except BusError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{key} never stored")
