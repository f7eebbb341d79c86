"""Leadership (shared/leadership.py) on a real nats-server: the marker, the handover, and
a leader suspended while cut off or told at once when deposed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec

from berth_cli.natsserver import NatsServer
from shared.bus import STREAM, Bus
from shared.events import AnyEvent, LeaderElected, WorkloadEvicted, WorkloadRef, decode_event
from shared.leadership import Leadership
from shared.lease import LEASE_BUCKET, LeaseRecord, LeaseSettings
from tests.conftest import bus_auth
from tests.lease_setup import FAST, ROOMY, _free_port, _warmed


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
