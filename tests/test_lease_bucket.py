"""The lease (shared/lease.py) on a real nats-server's bucket: taking, renewing, losing
and releasing it, and lapses counted on the standby's own clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from nats.js.kv import KeyValue

from berth_cli.natsserver import NatsServer
from shared.bus import Bus, BusError
from shared.lease import Lease, LeaseLost, LeaseRecord, LeaseSettings
from tests.conftest import bus_auth
from tests.lease_setup import FAST, ROOMY, _free_port, _warmed

# Where a lapse is timed on the standby's recorded looks (no load can move those): a lapse
# of 1.5 s, each get and write bounded at 1 s.
LAPSING = LeaseSettings(duration=1.5, renew_every=1.0, renew_deadline=1.2, poll_every=0.05)
# Where a holder renews against a standby: renewals far more often than the lapse.
RENEWING = LeaseSettings(duration=2.0, renew_every=0.25, renew_deadline=1.5, poll_every=0.1)


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
