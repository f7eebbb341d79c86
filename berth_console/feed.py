"""The console's reading of the bus, shared by every browser.

- the event stream through ONE ordered consumer, from its first event (the workload rows are
  its fold), then live; a page never opens a consumer of its own for live updates;
- the ``berth-jobs`` bucket as a list+watch (managed jobs);
- the ``berth-config`` bucket's changes, which only mark the queues stale;
- admission's ``clusterqueues``, ``localqueues`` and ``cohorts`` answers, asked again when
  events or config marked them stale, at most once a second and at least every few seconds
  (the sparkline's samples): whatever the number of browsers, admission answers at most
  three requests a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.msg import Msg
from nats.js import api
from nats.js.kv import KeyValue

from berth_console.model import SAMPLE_EVERY_S, Model
from berth_console.queries import Queries, QueryError
from shared.bus import (
    CONFIG_BUCKET,
    JOBS_BUCKET,
    STREAM,
    BucketNotFound,
    BucketWatch,
    Bus,
    BusError,
    NotFound,
    bus_call,
    live_value,
)
from shared.bus.batches import record_events
from shared.events import subject_for
from shared.jobs import decode_job
from shared.logging import get_logger

__all__ = ["BusFeed"]

log = get_logger("console.feed")
REFRESH_MIN_S = 1.0  # admission is asked at most this often
RETRY_S = 1.0


class BusFeed:
    def __init__(self, bus: Bus, model: Model, queries: Queries) -> None:
        self.bus = bus
        self.model = model
        self.queries = queries
        self.stopping = asyncio.Event()
        self._queues_stale = asyncio.Event()
        self._catch_up_to = 0
        self._started = 0.0
        self._waiting_logged = False

    def stop(self) -> None:
        self.stopping.set()
        self._queues_stale.set()  # wakes the refresh loop

    async def run(self) -> None:
        """Every reading loop, until :meth:`stop`; a loop that fails is logged and retried."""
        async with asyncio.TaskGroup() as group:
            for name, loop in (
                ("events", self._follow_events),
                ("jobs", self._follow_jobs),
                ("config", self._follow_config),
                ("queues", self._refresh_queues),
            ):
                group.create_task(self._retrying(name, loop), name=f"console.{name}")

    async def _retrying(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        # A console keeps serving what it has while one of its readings fails: the pages say
        # what is stale (admission's answer, the reading of the stream), the loop tries again.
        while not self.stopping.is_set():
            try:
                await bus_call(loop())
            except (BusError, OSError, TimeoutError) as error:
                log.warning("feed_retry", loop=name, error=repr(error))
            except Exception:
                log.exception("feed_failed", loop=name)
            await self._pause(RETRY_S)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    # --- the event stream ------------------------------------------------------------------

    async def _follow_events(self) -> None:
        try:
            last = (await bus_call(self.bus.js.stream_info(STREAM))).state.last_seq
        except NotFound:
            if not self._waiting_logged:  # the services create it; said once, not each second
                log.info("waiting_for_stream", stream=STREAM)
                self._waiting_logged = True
            return
        self._catch_up_to = last
        self._started = time.monotonic()
        if self.model.seq >= last:
            self._caught_up()
        # After a reconnect (a new subscription), resume after what is folded already.
        resume = self.model.seq + 1
        subscription = await self.bus.js.subscribe(
            "berth.>",
            stream=STREAM,
            cb=self._on_event,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            config=api.ConsumerConfig(opt_start_seq=resume),
        )
        # Until the console stops, or the connection comes back after a failover: the
        # consumer may have died with a NATS node, and a new one (the next round of
        # _retrying) resumes now rather than at nats-py's heartbeat check, seconds later.
        reconnected = asyncio.Event()
        self.bus.reconnects.add(reconnected.set)
        waits = [asyncio.create_task(e.wait()) for e in (self.stopping, reconnected)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.bus.reconnects.discard(reconnected.set)
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            with contextlib.suppress(BusError, ValueError):
                await bus_call(subscription.unsubscribe())

    async def _on_event(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        # The record: a batch's events, not their per-workload copies, which a deployment
        # may not keep (BERTH_BUS_COPIES; docs/events.md "The per-workload view").
        events = record_events(msg)
        self.model.apply_message(seq, [(subject_for(event), event) for event in events])
        self._queues_stale.set()
        if not self.model.caught_up and seq >= self._catch_up_to:
            self._caught_up()

    def _caught_up(self) -> None:
        self.model.caught_up = True
        log.info(
            "caught_up",
            events=self.model.seq,
            workloads=len(self.model.workloads.rows),
            seconds=round(time.monotonic() - self._started, 3),
        )
        self.model.changes.bump("workloads", "events")

    # --- buckets ---------------------------------------------------------------------------

    async def _bucket(self, name: str) -> KeyValue | None:
        """The bucket, or None if it does not exist yet (the console never creates one)."""
        try:
            return await self.bus.existing_kv(name)
        except BucketNotFound:
            return None

    async def _follow_jobs(self) -> None:
        kv = await self._bucket(JOBS_BUCKET)
        if kv is None:
            return
        watch, entries = await BucketWatch.start(kv)
        for entry in entries:
            self._job_entry(entry)

        async def handle(entry: KeyValue.Entry) -> None:
            self._job_entry(entry)

        await watch.follow(handle, stopping=self.stopping)

    def _job_entry(self, entry: KeyValue.Entry) -> None:
        if not entry.key.startswith("job."):
            return  # the id counter
        value = live_value(entry)
        if value is None:
            self.model.drop_job(int(entry.key.removeprefix("job.")))
            return
        try:
            self.model.set_job(decode_job(value))
        except msgspec.DecodeError as error:
            log.warning("malformed_job", key=entry.key, error=str(error))

    async def _follow_config(self) -> None:
        kv = await self._bucket(CONFIG_BUCKET)
        if kv is None:
            return
        watch, _ = await BucketWatch.start(kv)

        async def handle(_: KeyValue.Entry) -> None:
            self._queues_stale.set()

        self._queues_stale.set()
        await watch.follow(handle, stopping=self.stopping)

    # --- admission's answers ---------------------------------------------------------------

    async def _refresh_queues(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queues_stale.wait(), SAMPLE_EVERY_S)
            if self.stopping.is_set():
                return
            self._queues_stale.clear()
            try:
                cluster_queues = await self.queries.admission("clusterqueues")
                local_queues = await self.queries.admission("localqueues")
                cohorts = await self.queries.admission("cohorts")
            except QueryError as error:
                self.model.queues_failed(str(error))
            else:
                self.model.set_queues(cluster_queues, local_queues, cohorts)
            await self._pause(REFRESH_MIN_S)
