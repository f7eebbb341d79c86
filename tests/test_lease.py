"""The lease (shared/lease.py) and leadership (shared/leadership.py) on a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from nats.js.kv import KeyValue

from berth_cli.natsserver import NatsServer
from shared.bus import STREAM, Bus, BusError
from shared.events import AnyEvent, LeaderElected, WorkloadEvicted, WorkloadRef, decode_event
from shared.leadership import Leadership
from shared.lease import (
    LEASE_BUCKET,
    Lease,
    LeaseLost,
    LeaseRecord,
    LeaseSettings,
    replica_id_from_env,
)
from tests.conftest import bus_auth

FAST = LeaseSettings.scaled(0.6)  # lapse 0.6 s, renew every 0.2 s, give up after 0.4 s
# Where no lapse is timed: every get and write is bounded at 1 s, not FAST's 0.2 s, which a
# loaded machine can outlast for reasons no such test is about.
ROOMY = LeaseSettings.scaled(3)
# Where a lapse is timed on the standby's recorded looks (no load can move those): a lapse
# of 1.5 s, each get and write bounded at 1 s.
LAPSING = LeaseSettings(duration=1.5, renew_every=1.0, renew_deadline=1.2, poll_every=0.05)
# Where a holder renews against a standby: renewals far more often than the lapse.
RENEWING = LeaseSettings(duration=2.0, renew_every=0.25, renew_deadline=1.5, poll_every=0.1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _warmed(bus: Bus) -> KeyValue:
    """The lease bucket, its first write already paid: a fresh stream's first write can
    outlast a lease's bound on a loaded machine, and the lease's first take would then fail
    (or land late, and be taken again with term 2) for a reason no test here is about."""
    kv = await bus.kv(LEASE_BUCKET)
    await kv.put("warm-up", b"")
    return kv


async def _kv(url: str) -> tuple[Bus, KeyValue]:
    """The lease bucket on a fresh server, warmed."""
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    await bus.ensure_stream()
    return bus, await _warmed(bus)


def _lease(
    kv: KeyValue,
    replica: str,
    settings: LeaseSettings = FAST,
    *,
    floor: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> Lease:
    return Lease(kv, role="admission", replica=replica, settings=settings, floor=floor, clock=clock)


class _Looking(Lease):
    """A lease noting its looks at the key: the reading of its own clock each was judged
    at, or None for a look that failed (a lapse is counted again from the next one)."""

    def __init__(self, kv: KeyValue, replica: str) -> None:
        super().__init__(kv, role="admission", replica=replica, settings=LAPSING)
        self.looks: list[float | None] = []

    def may_take(self, record: LeaseRecord | None, revision: int, now: float) -> bool:
        self.looks.append(now)
        return super().may_take(record, revision, now)

    async def try_acquire(self) -> bool:
        try:
            return await super().try_acquire()
        except (BusError, TimeoutError):
            self.looks.append(None)
            raise

    def since_failed(self) -> list[float]:
        """The readings of the looks after the last one that failed."""
        failed = [i for i, look in enumerate(self.looks) if look is None]
        start = failed[-1] + 1 if failed else 0
        return [look for look in self.looks[start:] if look is not None]


async def _record(kv: KeyValue) -> LeaseRecord:
    entry = await kv.get("admission")
    return msgspec.json.decode(entry.value or b"", type=LeaseRecord)


# --- the rule, with a clock of our own ----------------------------------------------------


def _held_by(holder: str) -> LeaseRecord:
    return LeaseRecord(holder, 1, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")


# (reason, looks: (record, revision, clock) in order, whether the last look may take it)
RULE_CASES: list[tuple[str, list[tuple[LeaseRecord | None, int, float]], bool]] = [
    ("a released lease is taken at once", [(_held_by(""), 5, 0.0)], True),
    ("our own id (restarted under it) takes it at once", [(_held_by("me"), 5, 0.0)], True),
    ("a first look at another's lease never takes it", [(_held_by("a"), 5, 100.0)], False),
    (
        "unchanged for less than a duration on our clock: still held",
        [(_held_by("a"), 5, 10.0), (_held_by("a"), 5, 10.5)],
        False,
    ),
    (
        "unchanged for a whole duration on our clock: lapsed",
        [(_held_by("a"), 5, 10.0), (_held_by("a"), 5, 10.75)],
        True,
    ),
    (
        "a renewal (new revision) restarts the count from when we saw it",
        [(_held_by("a"), 5, 10.0), (_held_by("a"), 6, 10.5), (_held_by("a"), 6, 10.9)],
        False,
    ),
    (
        "an unreadable record lapses by the same rule",
        [(None, 5, 10.0), (None, 5, 10.7)],
        True,
    ),
]


@pytest.mark.parametrize(("reason", "looks", "takes"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_when_a_lease_may_be_taken(
    reason: str, looks: list[tuple[LeaseRecord | None, int, float]], takes: bool
) -> None:
    """The lapse rule counts on the observer's own clock, never on the record's times."""
    lease = Lease(None, role="admission", replica="me", settings=FAST)  # type: ignore[arg-type]
    verdicts = [lease.may_take(record, revision, clock) for record, revision, clock in looks]
    assert verdicts[-1] is takes, reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("Admission-0", "uppercase"),
        ("admission_0", "underscore"),
        ("-admission", "leading dash"),
        ("a" * 64, "longer than 63"),
        ("admission.0", "a dot (it would split the membership key)"),
    ],
)
def test_a_replica_id_must_be_a_dns_label(value: str, reason: str) -> None:
    """BERTH_REPLICA_ID is refused unless it is a DNS-1123 label."""
    with pytest.raises(ValueError, match="DNS-1123"):
        replica_id_from_env("admission", {"BERTH_REPLICA_ID": value})


def test_the_default_replica_id_is_role_host_pid() -> None:
    """Without BERTH_REPLICA_ID: ``<role>-<hostname>-<pid>``, itself a valid label."""
    replica = replica_id_from_env("admission", {})
    assert replica.startswith("admission-") and len(replica) <= 63
    assert replica_id_from_env("admission", {"BERTH_REPLICA_ID": replica}) == replica


# --- on a real bucket ----------------------------------------------------------------------


async def test_an_absent_lease_is_created_with_term_one(nats_url: str) -> None:
    """The first replica creates the key: it holds term 1."""
    bus, kv = await _kv(nats_url)
    try:
        lease = _lease(kv, "a", ROOMY)
        assert await lease.try_acquire()
        assert (lease.held, lease.term) == (True, 1)
        assert (await _record(kv)).holder == "a"
    finally:
        await bus.close()


async def test_a_renewed_lease_is_never_taken(nats_url: str) -> None:
    """While the holder renews, a standby looking for two lease durations never takes it.
    Renewing every quarter second against a 2 s lapse: only a stall of 1.75 s (the loop
    both share, a slow write) could let the standby see a lapse that renewal did not make."""
    bus, kv = await _kv(nats_url)
    stop = asyncio.Event()
    try:
        holder = _lease(kv, "a", RENEWING)
        assert await holder.try_acquire()
        keeping = asyncio.create_task(holder.keep(stop))
        standby = _lease(kv, "b", RENEWING)
        deadline = time.monotonic() + 2 * RENEWING.duration
        while time.monotonic() < deadline:
            with contextlib.suppress(BusError, TimeoutError):  # a look that timed out took nothing
                assert not await standby.try_acquire()
            await asyncio.sleep(RENEWING.poll_every)
        stop.set()
        await keeping
        assert (await _record(kv)).holder == "a"
    finally:
        await bus.close()


async def test_a_lapsed_lease_is_taken_with_the_next_term(nats_url: str) -> None:
    """A holder that stops renewing (killed) loses the lease one duration after the standby
    first saw its last renewal, on the standby's own clock, at the first look past it; the
    standby holds term 2."""
    bus, kv = await _kv(nats_url)
    try:
        assert await _lease(kv, "a", LAPSING).try_acquire()
        standby = _Looking(kv, "b")
        started = time.monotonic()
        assert await asyncio.wait_for(standby.campaign(asyncio.Event()), 10)
        assert time.monotonic() - started >= LAPSING.duration  # load only lengthens it
        # The readings the standby judged: no load stretches or shrinks them.
        *before, taking = standby.since_failed()
        assert before, "a first look at another's lease took it"
        assert taking - before[0] >= LAPSING.duration, "taken before a whole duration"
        assert before[-1] - before[0] < LAPSING.duration, "a look past the lapse did not take it"
        assert standby.term == 2 and (await _record(kv)).holder == "b"
    finally:
        await bus.close()


async def test_the_same_replica_id_takes_its_lease_back_at_once(nats_url: str) -> None:
    """A replica restarted under the same id (``berth up`` restarting admission-0) need not
    wait for its own lease to lapse; it holds the next term."""
    bus, kv = await _kv(nats_url)
    try:
        assert await _lease(kv, "admission-0", ROOMY).try_acquire()
        restarted = _lease(kv, "admission-0", ROOMY)
        assert await restarted.try_acquire()
        assert restarted.term == 2
    finally:
        await bus.close()


async def test_two_standbys_racing_for_a_lapsed_lease_one_wins(nats_url: str) -> None:
    """The compare-and-swap lets exactly one of two candidates take the same revision."""
    bus, kv = await _kv(nats_url)
    now = 0.0
    try:
        assert await _lease(kv, "a", ROOMY).try_acquire()
        # Their clock is ours: the lapse passes without a wait, so no bound need be short.
        b, c = (_lease(kv, replica, ROOMY, clock=lambda: now) for replica in ("b", "c"))
        assert not await b.try_acquire() and not await c.try_acquire()  # first looks
        now += ROOMY.duration
        results = await asyncio.gather(b.try_acquire(), c.try_acquire())
        assert sorted(results) == [False, True]
        winner = b if b.held else c
        assert winner.term == 2 and (await _record(kv)).holder == winner.replica
    finally:
        await bus.close()


async def test_a_holder_whose_lease_was_taken_loses_it_on_renewal(nats_url: str) -> None:
    """A deposed holder's next renewal loses the swap: LeaseLost, and it no longer holds."""
    bus, kv = await _kv(nats_url)
    try:
        holder = _lease(kv, "a", ROOMY)
        assert await holder.try_acquire()
        entry = await kv.get("admission")
        assert entry.revision is not None
        taken = LeaseRecord("b", 2, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
        await kv.update("admission", msgspec.json.encode(taken), last=entry.revision)
        with pytest.raises(LeaseLost, match="another replica"):
            await holder.renew()
        assert not holder.held
    finally:
        await bus.close()


async def test_a_released_lease_is_taken_at_once_and_terms_keep_growing(nats_url: str) -> None:
    """A clean stop hands the lease back (holder "", term kept): a standby takes it on its
    next look with term 2, not 1, so the fence of term 1's marker never voids it."""
    bus, kv = await _kv(nats_url)
    try:
        holder = _lease(kv, "a", ROOMY)
        assert await holder.try_acquire()
        standby = _lease(kv, "b", ROOMY)
        assert not await standby.try_acquire()
        await holder.release()
        assert (await _record(kv)).holder == ""
        assert await standby.try_acquire()
        assert standby.term == 2
        await holder.release()  # no longer held: leaves b's lease alone
        assert (await _record(kv)).holder == "b"
    finally:
        await bus.close()


async def test_terms_continue_from_the_last_marker_if_the_bucket_was_lost(nats_url: str) -> None:
    """With no key but a marker of term 5 in the stream, the next holder takes term 6."""
    bus, kv = await _kv(nats_url)
    try:
        lease = _lease(kv, "a", ROOMY, floor=5)
        assert await lease.try_acquire()
        assert lease.term == 6
    finally:
        await bus.close()


async def test_a_renewal_that_cannot_reach_nats_fails_without_losing_the_lease(
    nats_server: NatsServer,
) -> None:
    """NATS unreachable: a renewal fails within its bound (``renew_every``: it does not hang
    for the client's 5 s) and the holder still holds the lease: only a lost swap takes it."""
    bus, kv = await _kv(nats_server.url)
    try:
        holder = _lease(kv, "a")
        assert await holder.try_acquire()
        nats_server.stop()
        started = time.monotonic()
        assert not await holder.renew()
        assert time.monotonic() - started < 2.0  # far from the client's 5 s
        assert holder.held and holder.acting_until() < time.monotonic() + FAST.renew_deadline
    finally:
        bus.closing = True
        with contextlib.suppress(ConnectionError):
            await bus.nc.close()


async def test_a_leader_cut_off_from_nats_stops_acting_in_time_and_resumes_its_term(
    tmp_path: Path,
) -> None:
    """No renewal for ``renew_deadline``: the leader is suspended (not active, its bus hands
    consumers nothing) before a standby could take over; NATS back, its next renewal proves
    nobody took the lease and it acts again under the same term, without a new marker."""
    server = NatsServer(store_dir=tmp_path / "nats", port=_free_port()).start()
    bus = await Bus.connect(server.url, source="admission", auth=bus_auth(server.url))
    await bus.ensure_stream()
    await _warmed(bus)
    lost: list[str] = []
    # A lapse of 3 s, suspended 2 s after the last renewal: a second's margin for load.
    leader = Leadership(
        bus=bus, role="admission", replica="admission-0", settings=ROOMY, on_lost=lost.append
    )
    finish = asyncio.Event()
    task = asyncio.create_task(leader.run(stopping=finish, finish=finish))
    try:
        await asyncio.wait_for(leader.active.wait(), 5)
        assert bus.acting is leader.active
        server.stop()
        for _ in range(500):  # 5 s at most
            if not leader.is_active:
                break
            await asyncio.sleep(0.01)
        # Before anyone may take over: a standby counts a whole duration from no earlier
        # than the last renewal that went through (measured from that, not from the cut).
        assert leader.lease is not None
        assert time.monotonic() - leader.lease.confirmed < ROOMY.duration
        assert leader.suspended and lost == []
        server.start()
        await asyncio.wait_for(leader.active.wait(), 10)
        assert (leader.term, leader.suspended, lost) == (1, False, [])
    finally:
        finish.set()
        await asyncio.gather(task, return_exceptions=True)
        await bus.close()
        server.stop()


async def test_a_standby_cut_off_from_nats_waits_a_whole_duration_again(tmp_path: Path) -> None:
    """A lapse counts only time the standby could see the key: after an outage longer than
    the lease it does not take the lease at once (its holder was likely cut off too and is
    about to renew), but a whole duration after its first look since."""
    port = _free_port()
    server = NatsServer(store_dir=tmp_path / "nats", port=port).start()
    bus, kv = await _kv(server.url)
    try:
        assert await _lease(kv, "a", LAPSING).try_acquire()  # and never renewed
        standby = _Looking(kv, "b")
        assert not await standby.try_acquire()  # first look
        [first] = standby.since_failed()
        campaign = asyncio.create_task(standby.campaign(asyncio.Event()))
        server.stop()
        await asyncio.sleep(LAPSING.duration + 0.5)
        server.start()
        assert await asyncio.wait_for(campaign, 15)
        # The readings the standby judged: no load stretches or shrinks them.
        assert None in standby.looks, "the campaign saw the outage"
        *since, taking = standby.since_failed()
        assert since, "the first look after the outage took the lease"
        assert since[0] - first > LAPSING.duration  # counted from the first look: lapsed
        assert taking - since[0] >= LAPSING.duration, "taken before a whole duration since"
        assert since[-1] - since[0] < LAPSING.duration, "a look past the lapse did not take it"
    finally:
        await bus.close()
        server.stop()


# --- leadership: the marker, the handover ---------------------------------------------------


async def test_a_leader_announces_its_term_and_hands_over_on_a_clean_stop(nats_url: str) -> None:
    """The first replica leads with term 1 and publishes its marker; the second stands by;
    when the first finishes it releases the lease and the second leads at once, term 2."""
    auth = bus_auth(nats_url)
    buses = [await Bus.connect(nats_url, source="admission", auth=auth) for _ in range(2)]
    await buses[0].ensure_stream()
    await _warmed(buses[0])
    # A lapse of 10 s: a handover well within it cannot be a takeover by lapse.
    settings = LeaseSettings(duration=10, renew_every=1, renew_deadline=5, poll_every=0.05)
    finishes = [asyncio.Event(), asyncio.Event()]
    lost: list[str] = []
    leaders = [
        Leadership(
            bus=bus,
            role="admission",
            replica=f"admission-{i}",
            settings=settings,
            on_lost=lost.append,
        )
        for i, bus in enumerate(buses)
    ]
    tasks = [asyncio.create_task(leaders[0].run(stopping=finishes[0], finish=finishes[0]))]
    try:
        await asyncio.wait_for(leaders[0].active.wait(), 5)
        tasks.append(asyncio.create_task(leaders[1].run(stopping=finishes[1], finish=finishes[1])))
        await asyncio.wait_for(leaders[1].decided.wait(), 5)
        assert (leaders[0].term, buses[0].term, leaders[1].is_active) == (1, 1, False)

        finishes[0].set()
        started = time.monotonic()
        await asyncio.wait_for(leaders[1].active.wait(), 15)
        assert time.monotonic() - started < 5  # released: no lapse (9 s at least) waited for
        assert (leaders[1].term, buses[1].term) == (2, 2)

        markers = []
        for sequence in (1, 2):
            stored = await buses[1].js.get_msg(STREAM, seq=sequence)
            markers.append(decode_event(stored.data or b""))
        assert [(m.term, m.id) for m in markers if isinstance(m, LeaderElected)] == [
            (1, "leader-admission-t1"),
            (2, "leader-admission-t2"),
        ]
        assert lost == []
    finally:
        for finish in finishes:
            finish.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for bus in buses:
            await bus.close()


async def test_a_leader_whose_lease_is_taken_is_told_at_once(nats_url: str) -> None:
    """A leader deposed behind its back (its key overwritten) stops being active and calls
    ``on_lost`` at its next renewal."""
    bus = await Bus.connect(nats_url, source="admission", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    lost: list[str] = []
    leader = Leadership(
        bus=bus, role="admission", replica="admission-0", settings=FAST, on_lost=lost.append
    )
    finish = asyncio.Event()
    task = asyncio.create_task(leader.run(stopping=finish, finish=finish))
    try:
        await asyncio.wait_for(leader.active.wait(), 5)
        kv = await bus.kv(LEASE_BUCKET)
        await kv.put("admission", msgspec.json.encode(LeaseRecord("admission-9", 7, "", "")))
        await asyncio.wait_for(task, 5)
        assert not leader.is_active and lost and "another replica" in lost[0]
    finally:
        finish.set()
        await asyncio.gather(task, return_exceptions=True)
        await bus.close()


async def test_a_suspended_replica_hands_its_consumers_nothing_until_it_acts_again(
    nats_url: str,
) -> None:
    """While ``bus.acting`` is clear (a suspended lease) a consumer holds what it fetched
    and hands nothing to its handler; once it is set again the batch is handled."""
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    try:
        await bus.publish(LeaderElected(source="admission", role="admission", holder="a", term=1))
        await bus.publish(
            WorkloadEvicted(
                source="watcher",
                workload=WorkloadRef("default", "w", "uid-w"),
                generation=1,
                reason="Preempted",
            )
        )
        bus.acting = asyncio.Event()
        subscription = await bus.durable_subscription("gated", ["berth.wl.>"])
        handled: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(e.workload.name for e in events)
            stop.set()

        consuming = asyncio.create_task(bus.consume(subscription, handler, stopping=stop))
        await asyncio.sleep(0.5)
        assert handled == []
        bus.acting.set()
        await asyncio.wait_for(consuming, 5)
        assert handled == ["w"]
    finally:
        await bus.close()
