"""The local backend: Berth's embedded "cluster" on one machine.

Objects (Jobs, Pods, RayJobs) live in the ``berth-objects`` key-value bucket, this backend's
private store: it writes them itself, carrying out the commands of ``berth submit`` and
``berth delete`` (``SubmitWorkload``, ``RemoveWorkload``) and of recovery, and list-watches
that bucket the way the kubernetes backend list-watches the API. It reports each new object as
``WorkloadSubmitted``, runs admitted workloads as local processes (:mod:`.runs`), stops them
on eviction and reports ``WorkloadStarted``, ``WorkloadFinished`` (:mod:`.finishes`),
``WorkloadEvicted`` and ``WorkloadDeleted``.

What runs is recorded in the ``berth-status`` bucket (:mod:`.statuses`), so a restarted
watcher knows what its predecessor started: such a workload is stopped and reported evicted,
and admission queues it again with its original queue time.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime
from typing import Any

import msgspec
from nats.js.kv import KeyValue

from services.watcher import reporting
from services.watcher.backend import COMMAND_SUBJECTS
from services.watcher.command_order import create_stands
from services.watcher.local.finishes import TERMINAL_PHASES, unreported_finish
from services.watcher.local.grouping import PodGroups
from services.watcher.local.objects import find_object, read_object, read_status, read_workload
from services.watcher.local.runs import Runs
from services.watcher.local.simulated import Simulated
from services.watcher.local.spec_memo import SpecMemo
from services.watcher.local.statuses import StatusStore
from services.watcher.logs_api import serve_logs
from services.watcher.pods_ready_gate import follow_pods_ready_setting
from shared.bus import (
    OBJECTS_BUCKET,
    STATUS_BUCKET,
    BucketWatch,
    KeyExists,
    SentEvents,
    Settling,
    live_value,
)
from shared.bus.watching import WATCH_BATCH
from shared.deadletter import dead_letters
from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    EvictionRequested,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadSubmitted,
    now,
    subject_for,
)
from shared.logging import get_logger
from shared.service import Runtime
from shared.workloads import workload_key

__all__ = ["LocalBackend", "stop_grace_from_env"]

log = get_logger("watcher.local")

LISTED_BATCH = 1024  # announcements of the objects listed at start sent at most together
ANNOUNCE_PIECE = 256  # announcements of a round of changes sent together, acks awaited later
OBJECTS_WATCH_QUEUE = WATCH_BATCH  # changes waiting for a round: a whole round's worth

Announcement = tuple[WorkloadSubmitted, str]  # the report and its object's kind


def announced_at(announcements: list[Announcement]) -> datetime:
    """The moment of the next announcement: its batch's, read by the batch's first one (the
    reports sent together share their moment: reporting.py). A batch starts after the last
    one was sent, so its announcements are not earlier than what was published before them
    (an orphan's eviction, a deletion, the previous batch). Except after a failover: a batch
    whose publish failed is sent again after later ones of its round may have been stored
    (:meth:`LocalBackend._observe_changes`), and so comes after them with earlier times.
    Those are other workloads' submissions; where a step back in time is read (admission
    fair sharing's ledger), it counts as no time."""
    return announcements[0][0].time if announcements else now()


class LocalBackend:
    def __init__(self, runtime: Runtime, *, stop_grace: float) -> None:
        self.runtime = runtime
        self.bus = runtime.bus
        self.objects: dict[str, dict[str, Any]] = {}  # bucket key -> object
        self.store = StatusStore(self.objects)
        self.runs = Runs(runtime, self.store, self.objects, stop_grace=stop_grace)
        self.stop_grace = stop_grace
        self.announced: set[str] = set()  # uids reported as submitted by this process
        self.announcing: set[str] = set()  # uids of the round's announcements not yet flushed
        # The round's announcements sent and not yet acked, each batch with what it sent.
        self.sending: list[tuple[SentEvents, list[Announcement]]] = []
        self.kv: KeyValue | None = None
        self.groups = PodGroups()  # pod groups' members, until each is one PodGroup object
        self.specs = SpecMemo()  # specs of the objects read lately (spec_memo.py)
        # Finished runs found at start whose report may be missing (finishes.py).
        self.unreported: list[tuple[str, dict[str, Any]]] = []

    # --- the list-watch of the objects bucket --------------------------------------------

    async def run(self) -> None:
        self.letters = dead_letters(self.bus, self.runtime.name)
        self.kv = await self.bus.kv(OBJECTS_BUCKET)
        status_kv = await self.bus.kv(STATUS_BUCKET)
        self.store.open(self.bus, status_kv, self.runtime.stopping)
        for entry in await BucketWatch.snapshot(status_kv):
            value = live_value(entry)
            if value is not None:
                status = read_status(value)
                if isinstance(status, str):  # skipped: the workload is seen as never started
                    await self._dead_letter(STATUS_BUCKET, entry, status, value)
                    continue
                self.store.statuses[entry.key] = status
        watch, initial = await BucketWatch.start(self.kv, queue=OBJECTS_WATCH_QUEUE)
        await self._observe_listed(initial)
        # Before anything new is reported or decided: a lost finish holds quota until then.
        await self.runs.finishes.report_again(self.unreported)
        self.unreported.clear()
        for key in set(self.store.statuses) - set(self.objects):  # written after a deletion
            await self.store.forget(key)
        # Before the first decision is read: whether its run's readiness is reported.
        await follow_pods_ready_setting(self.runtime, self.runs.pods_ready, self.runs.held_ready)
        subscription = await self.bus.durable_subscription("watcher", COMMAND_SUBJECTS)
        logs = await serve_logs(self.bus, self.runs.log_root)
        self.runtime.spawn(
            self.bus.consume(subscription, self._on_decisions, stopping=self.runtime.stopping),
            name="watcher.decisions",
        )
        finishes = self.runs.finishes
        finisher = self.runtime.spawn(finishes.report_simulated(), name="watcher.finishes")
        self.runtime.set_ready()
        try:
            await watch.follow_batches(self._observe_changes, stopping=self.runtime.stopping)
        finally:
            await logs.unsubscribe()
            # Finishes already due are reported before anything is stopped.
            finishes.close()
            await asyncio.wait({finisher}, timeout=self.stop_grace)
            await self.runs.stop_everything()

    async def _observe_changes(self, entries: list[KeyValue.Entry]) -> None:
        """A round of changes (:meth:`_observe_round`), in batches of ``ANNOUNCE_PIECE``.

        Why: one awaited ack per object capped the watcher at a few thousand new workloads
        per second; one awaited publish per round, a round capped at one batch, capped it at
        one batch per round trip, so the changes that came during any pause (a collection,
        a busy moment of nats-server) were caught up one batch a round trip. A round now
        takes all that has come (``WATCH_BATCH``), and its first announcements go out while
        the rest are read."""
        await self._observe_round(entries, initial=False, piece=ANNOUNCE_PIECE)

    async def _observe_listed(self, entries: list[KeyValue.Entry]) -> None:
        """The objects that exist at start (:meth:`_observe_round`), in batches of
        ``LISTED_BATCH`` (why: one awaited publish per object made a watcher that took over
        thousands of live objects wait a round trip for each before it decided anything)."""
        await self._observe_round(entries, initial=True, piece=LISTED_BATCH)

    async def _observe_round(
        self, entries: list[KeyValue.Entry], *, initial: bool, piece: int
    ) -> None:
        """Entries in order. New workloads are announced in batches of at most ``piece``,
        each sent as soon as it is full, their acks awaited once at the round's end;
        anything else that publishes (a deletion, an orphan's eviction) first flushes the
        announcements before it, so the stream keeps the bucket's order.

        Each workload's events always keep it: a round announces a workload once (its uid),
        and a key changes uid only through a deletion, which flushes first. Different
        workloads' announcements may not after a failover: a batch whose publish failed (a
        reconnect, or no responders while the stream elects a leader) is sent again at the
        round's end, after later batches of the round that were stored (``SentEvents``);
        nothing is lost or stored twice. If the round fails midway, the batches sent are
        left unacked and unannounced (:meth:`_abandon_sending`)."""
        announcements: list[Announcement] = []
        try:
            for entry in entries:
                await self._observe(entry, initial=initial, announcements=announcements)
                if len(announcements) >= piece:
                    await self._send_announcements(announcements)
            await self._flush_announcements(announcements)
        finally:
            self._abandon_sending()

    async def _observe(
        self,
        entry: KeyValue.Entry,
        *,
        initial: bool,
        announcements: list[Announcement],
    ) -> None:
        value = live_value(entry)
        if value is None:
            obj = self.objects.pop(entry.key, None)
            if obj is not None:
                await self._flush_announcements(announcements)
                await self._deleted(obj)
                await self.store.forget(entry.key)
                await self.groups.deleted(self.kv, self.objects, obj)  # see grouping.py
            return
        read = read_workload(entry.key, value, self.specs)
        if isinstance(read, str):  # no poison pill: dead-lettered, skipped, the watch goes on
            await self._dead_letter(OBJECTS_BUCKET, entry, read, value)
            return
        obj, spec = read
        self.objects[entry.key] = obj
        if self.groups.grouped(obj):  # not a workload alone: its group is (grouping.py)
            await self.groups.pod_seen(self.kv, entry.key, obj)
            return
        uid = obj["metadata"]["uid"]
        status = self.store.of(entry.key, obj)
        phase = status.get("phase", "")
        if initial and unreported_finish(status):
            self.unreported.append((entry.key, obj))
        if phase in TERMINAL_PHASES or uid in self.announced:
            return
        if initial and phase == "Running" and uid not in self.runs.running:
            await self._flush_announcements(announcements)
            await self.runs.orphaned(entry.key, obj)
        if uid in self.announcing:
            return  # announced in this batch already
        announcements.append(
            (reporting.submitted(obj, spec, at=announced_at(announcements)), spec.kind)
        )
        self.announcing.add(uid)

    async def _send_announcements(self, announcements: list[Announcement]) -> None:
        """Send these announcements (emptied) as one batch; :meth:`_flush_announcements`
        awaits its acks."""
        if not announcements:
            return
        batch = list(announcements)
        announcements.clear()
        self.sending.append((await self.bus.send_many([event for event, _ in batch]), batch))

    async def _flush_announcements(self, announcements: list[Announcement]) -> None:
        """Send these announcements and await the acks of every batch sent so far, in order
        (a batch that failed is sent again: ``SentEvents.settle``); then they count as
        announced."""
        await self._send_announcements(announcements)
        sending = self.sending
        announced, info = self.announced, log.info  # the logger's lookup once per batch
        while sending:
            sent, batch = sending[0]
            await sent.settle()
            del sending[0]
            for event, kind in batch:
                ref = event.workload
                announced.add(ref.uid)
                info("workload_submitted", workload=ref.key, queue=event.queue_name, kind=kind)
        self.announcing.clear()

    def _abandon_sending(self) -> None:
        """At a round's end, through or failed (:meth:`_observe_round`): leave the batches
        sent and not acked (none once a flush is through): their acks are read as they come
        (``SentEvents.abandon``), and their workloads do not count as announced. A round
        that failed ends the watch, and a restarted watcher announces them again (same ids:
        stored once)."""
        for sent, _ in self.sending:
            sent.abandon()
        self.sending.clear()
        self.announcing.clear()

    async def _dead_letter(
        self, bucket: str, entry: KeyValue.Entry, reason: str, value: bytes
    ) -> None:
        identity = f"{entry.key}@{entry.revision}"
        await self.letters.send("object", f"{bucket}/{entry.key}", reason, value, identity=identity)

    async def _deleted(self, obj: dict[str, Any]) -> None:
        ref = reporting.ref_of(obj)
        was_running = await self.runs.deleted(ref)
        await self.bus.publish(reporting.deleted(ref))
        log.info("workload_deleted", workload=ref.key, was_running=was_running)

    # --- decisions from admission and preemption ------------------------------------------

    async def _on_decisions(self, events: list[AnyEvent]) -> Settling | None:
        """Each workload's decisions in order (by name: the CLI's remove names no uid, and a
        remove then a new submit of one name must run in that order); different workloads'
        concurrently.

        Why: starting a workload awaits a status write and a publish; one workload after
        the other, a batch of admissions took a round trip each, and the last of a large
        batch started long after its admission. Decisions about one workload keep their order.
        Simulated runs admitted in the batch start together: one pipelined round of status
        writes and one of Started reports, left settling (the bus acks the batch once they
        are stored) so that the next batch's runs start without waiting for them.
        """
        by_workload: dict[str, list[AnyEvent]] = {}
        for event in events:
            by_workload.setdefault(event.workload.key, []).append(event)
        simulated: list[tuple[Simulated, float]] = []
        in_order: list[list[AnyEvent]] = []
        for group in by_workload.values():
            run = self.runs.simulated_run(group[0]) if len(group) == 1 else None
            if run is None:
                in_order.append(group)
            else:
                simulated.append(run)
        settling = await self.runs.start_simulated(simulated) if simulated else None
        outcomes = await asyncio.gather(
            *(self._decide_in_order(group) for group in in_order), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                if settling is not None:
                    await settling  # the runs it started must still be announced
                raise outcome  # the batch is handled again; every step is idempotent
        return settling

    async def _decide_in_order(self, events: list[AnyEvent]) -> None:
        for event in events:
            if isinstance(event, WorkloadAdmitted):
                await self.runs.start(event)
            elif isinstance(event, CreateWorkload | SubmitWorkload):
                await self._create(event)
            elif isinstance(event, DeleteWorkload | RemoveWorkload):
                await self._delete(event)
            elif isinstance(event, EvictionRequested):
                # Stopping takes up to the grace period: never hold up other decisions for it.
                self.runtime.spawn(self.runs.evict(event), name=f"evict-{event.workload.key}")

    async def _create(self, event: CreateWorkload | SubmitWorkload) -> None:
        """Create a workload object for recovery (a managed job's attempt) or the CLI, once."""
        assert self.kv is not None
        ref = event.workload
        key = workload_key(ref.namespace, ref.name)
        value = msgspec.json.encode(event.object)
        refused = read_object(key, value)
        if isinstance(refused, str):  # a malformed command: dead-lettered, nothing created
            source = subject_for(event)
            await self.letters.send("object", source, refused, value, identity=event.id)
            return
        if not await create_stands(self.bus.js, event):
            return  # cancelled (or superseded) after it was sent: see command_order.py
        try:
            await self.kv.create(key, value)
        except KeyExists:
            if find_object(self.objects, ref) is None:  # a different object holds the name
                log.error("create_conflict", workload=ref.key, reason="name taken")

    async def _delete(self, event: DeleteWorkload | RemoveWorkload) -> None:
        """Delete a workload object (the CLI's names any uid); the watch then stops it."""
        assert self.kv is not None
        any_uid = isinstance(event, RemoveWorkload)
        current = find_object(self.objects, event.workload, any_uid=any_uid)
        if current is not None:
            await self.kv.delete(current[0])

    # --- the watcher's Backend verbs (services/watcher/backend.py) ------------------------

    async def create(self, command: CreateWorkload | SubmitWorkload) -> None:
        await self._create(command)

    async def delete(self, command: DeleteWorkload | RemoveWorkload) -> None:
        await self._delete(command)

    async def admit(self, decision: WorkloadAdmitted) -> None:
        await self.runs.start(decision)

    async def evict(self, decision: EvictionRequested) -> None:
        await self.runs.evict(decision)

    async def observe(self) -> None:
        await self.run()


def stop_grace_from_env() -> float:
    return float(os.environ.get("BERTH_POD_GRACE_SECONDS", "5"))
