"""The local backend: Berth's embedded "cluster" on one machine.

Objects (Jobs, Pods, RayJobs) live in the ``berth-objects`` key-value bucket, this backend's
private store: it writes them itself, carrying out the commands of ``berth submit`` and
``berth delete`` (``SubmitWorkload``, ``RemoveWorkload``) and of recovery, and list-watches
that bucket the way the kubernetes backend list-watches the API. It reports each new object as
``WorkloadSubmitted``, runs admitted workloads as local processes, stops them on eviction and
reports ``WorkloadStarted``, ``WorkloadFinished``, ``WorkloadEvicted`` and ``WorkloadDeleted``.

What runs is recorded in the ``berth-status`` bucket (phase, generation, pids; under the
object's key, with its uid), so a restarted watcher knows what its predecessor started: such a
workload is stopped and reported evicted, and admission queues it again with its original
queue time. Status lives apart from the objects, like Kubernetes' status subresource: writing
it rewrites no object, and the objects' watch does not echo it back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats.js.errors
from nats.js.kv import KeyValue

from services.watcher import metrics, reporting
from services.watcher.backend import COMMAND_SUBJECTS
from services.watcher.command_order import create_stands
from services.watcher.grouping import PodGroups
from services.watcher.logs_api import serve_logs
from services.watcher.objects import read_object, read_status
from services.watcher.processes import (
    RunningPods,
    kill_leftover,
    pod_commands,
    workload_log_dir,
)
from services.watcher.run_files import RunSetupError, prepare_run
from shared.bus import (
    OBJECTS_BUCKET,
    STATUS_BUCKET,
    BucketWatch,
    KeyUpdates,
    SentEvents,
    Settling,
    live_value,
)
from shared.deadletter import dead_letters
from shared.durations import parse_duration
from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    Event,
    EvictionRequested,
    PodSet,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
    subject_for,
)
from shared.logging import get_logger
from shared.pod_groups import POD_GROUP_KIND
from shared.publishing import AckTimeout
from shared.service import Runtime
from shared.workloads import (
    SIMULATED_RUNTIME_ANNOTATION,
    WorkloadError,
    workload_key,
    workload_spec,
)

__all__ = ["LocalBackend"]

log = get_logger("watcher.local")

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Rounds of simulated finishes sent and not yet acked; past this the finisher waits.
FINISH_ROUNDS_IN_FLIGHT = 8


class _Simulated:
    """A workload that runs no process and finishes after its simulated runtime: a timer,
    not a task (a burst of thousands costs thousands of timers and nothing else)."""

    def __init__(self, key: str, ref: WorkloadRef, generation: int) -> None:
        self.key = key
        self.ref = ref
        self.generation = generation
        self.stopping = False
        # The finish is reported only after Running is written and Started published.
        self.announced = False
        self.elapsed = False
        self.timer: asyncio.TimerHandle | None = None


class LocalBackend:
    def __init__(self, runtime: Runtime, *, stop_grace: float) -> None:
        self.runtime = runtime
        self.bus = runtime.bus
        self.stop_grace = stop_grace
        self.log_root = Path(runtime.data_dir) / "logs"
        self.objects: dict[str, dict[str, Any]] = {}  # bucket key -> object
        self.statuses: dict[str, dict[str, Any]] = {}  # bucket key -> status (with "uid")
        self.announced: set[str] = set()  # uids reported as submitted by this process
        self.announcing: set[str] = set()  # uids of the batch's announcements not yet flushed
        self.running: dict[str, RunningPods | _Simulated] = {}  # uid -> what runs
        self.kv: KeyValue | None = None
        self.status_kv: KeyValue | None = None
        self.finishing: list[_Simulated] = []  # simulated runs whose time is up, unreported
        self.finish_wanted = asyncio.Event()
        self.closing = False  # set on shutdown: the finisher reports what is due, then ends
        self.groups = PodGroups()  # pod groups' members, until each is one PodGroup object

    # --- the list-watch of the objects bucket --------------------------------------------

    async def run(self) -> None:
        self.letters = dead_letters(self.bus, self.runtime.name)
        self.kv = await self.bus.kv(OBJECTS_BUCKET)
        self.status_kv = await self.bus.kv(STATUS_BUCKET)
        for entry in await BucketWatch.snapshot(self.status_kv):
            value = live_value(entry)
            if value is not None:
                status = read_status(value)
                if isinstance(status, str):  # skipped: the workload is seen as never started
                    await self._dead_letter(STATUS_BUCKET, entry, status, value)
                    continue
                self.statuses[entry.key] = status
        watch, initial = await BucketWatch.start(self.kv)
        for entry in initial:
            await self._observe(entry, initial=True)
        for key in set(self.statuses) - set(self.objects):  # written after a deletion
            await self._forget_status(key)
        subscription = await self.bus.durable_subscription("watcher", COMMAND_SUBJECTS)
        logs = await serve_logs(self.bus, self.log_root)
        self.runtime.spawn(
            self.bus.consume(subscription, self._on_decisions, stopping=self.runtime.stopping),
            name="watcher.decisions",
        )
        finisher = self.runtime.spawn(self._report_simulated_finishes(), name="watcher.finishes")
        self.runtime.set_ready()
        try:
            await watch.follow_batches(self._observe_changes, stopping=self.runtime.stopping)
        finally:
            await logs.unsubscribe()
            # Finishes already due are reported before anything is stopped.
            self.closing = True
            self.finish_wanted.set()
            await asyncio.wait({finisher}, timeout=self.stop_grace)
            await self._stop_everything()

    async def _observe_changes(self, entries: list[KeyValue.Entry]) -> None:
        """A batch of changes, in order. New workloads are announced with one pipelined
        publish for the batch (why: one awaited ack per object capped the watcher at a few
        thousand new workloads per second); anything else that publishes (a deletion) first
        flushes the announcements before it, so the stream keeps the bucket's order."""
        announcements: list[tuple[WorkloadSubmitted, str]] = []
        for entry in entries:
            await self._observe(entry, initial=False, announcements=announcements)
        await self._flush_announcements(announcements)

    async def _observe(
        self,
        entry: KeyValue.Entry,
        *,
        initial: bool,
        announcements: list[tuple[WorkloadSubmitted, str]] | None = None,
    ) -> None:
        value = live_value(entry)
        if value is None:
            obj = self.objects.pop(entry.key, None)
            if obj is not None:
                if announcements:
                    await self._flush_announcements(announcements)
                await self._deleted(obj)
                await self._forget_status(entry.key)
                await self.groups.deleted(self.kv, self.objects, obj)  # see grouping.py
            return
        read = read_object(entry.key, value)
        if isinstance(read, str):  # no poison pill: dead-lettered, skipped, the watch goes on
            await self._dead_letter(OBJECTS_BUCKET, entry, read, value)
            return
        obj = self.objects[entry.key] = read
        if self.groups.grouped(obj):  # not a workload alone: its group is (grouping.py)
            await self.groups.pod_seen(self.kv, entry.key, obj)
            return
        uid = obj["metadata"]["uid"]
        phase = self._status(entry.key, obj).get("phase", "")
        if phase in TERMINAL_PHASES or uid in self.announced:
            return
        if initial and phase == "Running" and uid not in self.running:
            await self._orphaned(entry.key, obj)
        if announcements is None:
            await self._announce(obj)
            return
        if uid in self.announcing:
            return  # announced in this batch already
        announcement = self._announcement(obj)
        if announcement is not None:
            announcements.append(announcement)
            self.announcing.add(uid)

    async def _flush_announcements(
        self, announcements: list[tuple[WorkloadSubmitted, str]]
    ) -> None:
        if not announcements:
            return
        batch = list(announcements)
        announcements.clear()
        self.announcing.clear()
        await self.bus.publish_many([event for event, _ in batch])
        for event, kind in batch:
            self.announced.add(event.workload.uid)
            log.info(
                "workload_submitted", workload=event.workload.key, queue=event.queue_name, kind=kind
            )

    async def _announce(self, obj: dict[str, Any]) -> None:
        announcement = self._announcement(obj)
        if announcement is not None:
            await self._flush_announcements([announcement])

    def _announcement(self, obj: dict[str, Any]) -> tuple[WorkloadSubmitted, str] | None:
        ref = reporting.ref_of(obj)
        try:
            spec = workload_spec(obj)
        except WorkloadError as error:  # `berth submit` validates; this is a hand-made object
            log.error("invalid_workload", workload=ref.key, reason=str(error))
            return None
        return reporting.submitted(obj, spec), spec.kind

    async def _dead_letter(
        self, bucket: str, entry: KeyValue.Entry, reason: str, value: bytes
    ) -> None:
        identity = f"{entry.key}@{entry.revision}"
        await self.letters.send("object", f"{bucket}/{entry.key}", reason, value, identity=identity)

    async def _orphaned(self, key: str, obj: dict[str, Any]) -> None:
        """A workload a previous watcher ran: stop what is left of it and report it evicted."""
        status = self._status(key, obj)
        generation = int(status.get("generation", 0))
        kill_leftover([int(pid) for pid in status.get("pids") or []])
        await self._set_status(key, {"phase": "Evicted", "reason": "WatcherRestarted"})
        await self._publish(
            reporting.evicted(
                reporting.ref_of(obj),
                generation,
                reason="WatcherRestarted",
                message="the watcher restarted while the workload ran; it is queued again",
            )
        )

    async def _deleted(self, obj: dict[str, Any]) -> None:
        ref = reporting.ref_of(obj)
        running = self.running.pop(ref.uid, None)
        if running is not None:
            await self._stop(running)
        await self._publish(reporting.deleted(ref))
        log.info("workload_deleted", workload=ref.key, was_running=running is not None)

    # --- decisions from admission and preemption ------------------------------------------

    async def _on_decisions(self, events: list[AnyEvent]) -> Settling | None:
        """Each workload's decisions in order (by name: the CLI's remove names no uid, and a
        remove then a new submit of one name must run in that order); different workloads'
        concurrently.

        Why: starting a workload awaits a status write and a publish; one workload after
        the other, a batch of admissions took a round trip each (the Kueue benchmark measured
        admitted -> started at 0.3-0.9 s). Decisions about one workload keep their order.
        Simulated runs admitted in the batch start together: one pipelined round of status
        writes and one of Started reports, left settling (the bus acks the batch once they
        are stored) so that the next batch's runs start without waiting for them.
        """
        by_workload: dict[str, list[AnyEvent]] = {}
        for event in events:
            by_workload.setdefault(event.workload.key, []).append(event)
        simulated: list[tuple[_Simulated, float]] = []
        in_order: list[list[AnyEvent]] = []
        for group in by_workload.values():
            run = self._simulated_run(group[0]) if len(group) == 1 else None
            if run is None:
                in_order.append(group)
            else:
                simulated.append(run)
        settling = await self._start_simulated(simulated) if simulated else None
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
                await self._start(event)
            elif isinstance(event, CreateWorkload | SubmitWorkload):
                await self._create(event)
            elif isinstance(event, DeleteWorkload | RemoveWorkload):
                await self._delete(event)
            elif isinstance(event, EvictionRequested):
                # Stopping takes up to the grace period: never hold up other decisions for it.
                self.runtime.spawn(self._evict(event), name=f"evict-{event.workload.key}")

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
        except nats.js.errors.KeyWrongLastSequenceError:
            current = self._current(ref)
            if current is None:  # a different object holds the name
                log.error("create_conflict", workload=ref.key, reason="name taken")

    async def _delete(self, event: DeleteWorkload | RemoveWorkload) -> None:
        """Delete a workload object (the CLI's names any uid); the watch then stops it."""
        assert self.kv is not None
        current = self._current(event.workload, any_uid=isinstance(event, RemoveWorkload))
        if current is not None:
            await self.kv.delete(current[0])

    def _current(
        self, ref: WorkloadRef, *, any_uid: bool = False
    ) -> tuple[str, dict[str, Any]] | None:
        key = workload_key(ref.namespace, ref.name)
        obj = self.objects.get(key)
        if obj is None or (obj["metadata"]["uid"] != ref.uid and not any_uid):
            return None  # deleted, or replaced by another object of the same name
        return key, obj

    async def _start(self, event: WorkloadAdmitted) -> None:
        ref = event.workload
        current = self._current(ref)
        if current is None:
            log.info("admitted_unknown_workload", workload=ref.key, generation=event.generation)
            return
        key, obj = current
        status = self._status(key, obj)
        if int(status.get("generation", 0)) >= event.generation or ref.uid in self.running:
            return  # redelivered: this generation was already started
        run = self._simulated_run(event)
        if run is not None:
            await (await self._start_simulated([run]))
            return
        spec = workload_spec(obj)
        pods = _local_pods(obj, spec.pod_sets, spec.pod_specs, event)
        if any(not argv for _, argv, _, _ in pods):
            await self._finish(
                key,
                ref,
                event.generation,
                127,
                "a container has no command; the local backend cannot run an image's entrypoint",
            )
            return
        try:  # secrets in the environment, the task's files in its run directory
            run_dir = Path(self.runtime.data_dir) / "runs" / ref.namespace / ref.name
            pods = await prepare_run(
                self.bus, obj, spec.pod_specs, pods, run_dir=run_dir / str(event.generation)
            )
        except RunSetupError as error:
            await self._finish(key, ref, event.generation, 127, str(error))
            return
        images = sorted(
            {c.get("image", "") for p in spec.pod_specs.values() for c in p.get("containers", [])}
            - {""}
        )
        if images:
            log.warning(
                "image_ignored",
                workload=ref.key,
                images=images,
                reason="the local backend runs commands, not images",
            )
        try:
            log_dir = workload_log_dir(self.log_root, ref.namespace, ref.name)
            running = await RunningPods.start(
                generation=event.generation, pods=pods, log_dir=log_dir
            )
        except OSError as error:
            await self._finish(key, ref, event.generation, 127, f"cannot start process: {error}")
            return
        self.running[ref.uid] = running
        await self._set_status(
            key, {"phase": "Running", "generation": event.generation, "pids": running.pids}
        )
        await self._publish(reporting.started(ref, event.generation))
        metrics.STARTED.inc()
        log.info(
            "workload_started",
            workload=ref.key,
            queue=event.cluster_queue,
            pods=len(pods),
            generation=event.generation,
        )
        self.runtime.spawn(self._await_exit(key, ref, running), name=f"run-{ref.key}")

    def _simulated_run(self, event: AnyEvent) -> tuple[_Simulated, float] | None:
        """The run to start for an admission of a simulated workload not started yet."""
        if not isinstance(event, WorkloadAdmitted):
            return None
        current = self._current(event.workload)
        if current is None or event.workload.uid in self.running:
            return None
        key, obj = current
        annotations = obj["metadata"].get("annotations") or {}
        seconds = annotations.get(SIMULATED_RUNTIME_ANNOTATION)
        status = self._status(key, obj)
        if seconds is None or int(status.get("generation", 0)) >= event.generation:
            return None
        return _Simulated(key, event.workload, event.generation), parse_duration(seconds)

    async def _start_simulated(self, runs: list[tuple[_Simulated, float]]) -> Settling:
        """Start the runs' clocks and send their statuses and Started reports; returns what
        awaits the acks (and only then lets the runs' finishes be reported)."""
        loop = asyncio.get_running_loop()
        for run, seconds in runs:
            self.running[run.ref.uid] = run
            # The clock starts now, as a process would: the status write and the report are
            # bookkeeping, and awaiting them first would hold the quota that much longer.
            run.timer = loop.call_later(seconds, self._simulated_elapsed, run)
        try:
            # Statuses and reports in flight together: one round trip for the batch.
            writes = await self._send_statuses(
                [
                    (run.key, {"phase": "Running", "generation": run.generation, "pids": []})
                    for run, _ in runs
                ]
            )
            reports = await self.bus.send_many(
                [reporting.started(r.ref, r.generation) for r, _ in runs]
            )
        except BaseException:
            self._announce_runs(runs)
            raise
        return self._settle_started(runs, writes, reports)

    async def _settle_started(
        self, runs: list[tuple[_Simulated, float]], writes: _StatusWrites, reports: SentEvents
    ) -> None:
        try:
            await reports.settle()
            await self._settle_statuses(writes)
        finally:
            self._announce_runs(runs)
        metrics.STARTED.inc(len(runs))

    def _announce_runs(self, runs: list[tuple[_Simulated, float]]) -> None:
        for run, _ in runs:  # even on failure: a finish must never wait forever
            run.announced = True
            if run.elapsed:
                self._queue_finish(run)

    def _simulated_elapsed(self, run: _Simulated) -> None:
        run.elapsed = True
        if run.announced:
            self._queue_finish(run)

    def _queue_finish(self, run: _Simulated) -> None:
        if not run.stopping and self.running.get(run.ref.uid) is run:
            self.finishing.append(run)
            self.finish_wanted.set()

    async def _report_simulated_finishes(self) -> None:
        """Report the simulated runs whose time is up, all that are due in one pipelined
        round of Finished reports and one of status writes. The next round goes out without
        waiting for the acks of the last (up to ``FINISH_ROUNDS_IN_FLIGHT``): a finish that
        fell due meanwhile would otherwise hold its quota a round trip longer."""
        settling: set[asyncio.Task[None]] = set()
        while not self.closing or self.finishing:
            await self.finish_wanted.wait()
            self.finish_wanted.clear()
            due, self.finishing = self.finishing, []
            done = [run for run in due if self.running.get(run.ref.uid) is run]
            if not done:
                continue
            while len(settling) >= FINISH_ROUNDS_IN_FLIGHT:
                await asyncio.wait(settling, return_when=asyncio.FIRST_COMPLETED)
            sent = await self._send_finishes([(r.key, r.ref, r.generation, 0, "") for r in done])
            # Owned by the runtime: a failed round stops the service, as it always did.
            task = self.runtime.spawn(sent, name="watcher.finish-round")
            settling.add(task)
            task.add_done_callback(settling.discard)
        if settling:
            await asyncio.wait(settling)

    async def _await_exit(self, key: str, ref: WorkloadRef, running: RunningPods) -> None:
        outcomes = await running.wait()
        if running.stopping or self.running.get(ref.uid) is not running:
            return  # evicted or deleted: that path reports it
        failed = [outcome for outcome in outcomes if outcome.exit_code != 0]
        code = failed[0].exit_code if failed else 0
        message = f"pod {failed[0].pod} exited with code {code}" if failed else ""
        await self._finish(key, ref, running.generation, code, message)

    async def _finish(
        self, key: str, ref: WorkloadRef, generation: int, code: int, message: str
    ) -> None:
        await self._report_finishes([(key, ref, generation, code, message)])

    async def _report_finishes(self, finishes: list[_Finish]) -> None:
        await (await self._send_finishes(finishes))

    async def _send_finishes(self, finishes: list[_Finish]) -> Coroutine[Any, Any, None]:
        """Send finished runs' reports first (they free the quota), their statuses right
        behind them, one round trip for all; returns what awaits the acks. Should we die
        between the two, the next watcher reports the run as evicted by the restart; every
        consumer ignores an eviction of a generation that has finished."""
        for _, ref, _, _, _ in finishes:
            self.running.pop(ref.uid, None)
        reported = await self.bus.send_many(
            [
                reporting.finished(ref, gen, succeeded=code == 0, exit_code=code, message=text)
                for _, ref, gen, code, text in finishes
            ]
        )
        writes = await self._send_statuses(
            [
                (key, {"phase": _phase(code), "generation": gen, "exitCode": code, "pids": []})
                for key, _, gen, code, _ in finishes
            ]
        )
        return self._settle_finishes(finishes, reported, writes)

    async def _settle_finishes(
        self, finishes: list[_Finish], reported: SentEvents, writes: _StatusWrites
    ) -> None:
        await reported.settle()
        await self._settle_statuses(writes)
        for _, ref, gen, code, _ in finishes:
            metrics.FINISHED.labels(result=_phase(code)).inc()
            log.info(
                "workload_finished",
                workload=ref.key,
                phase=_phase(code),
                exit_code=code,
                generation=gen,
            )

    async def _evict(self, event: EvictionRequested) -> None:
        ref = event.workload
        running = self.running.get(ref.uid)
        if running is None or running.generation != event.generation:
            current = self._current(ref)
            status = self._status(*current) if current else {}
            started = int(status.get("generation", 0))
            if status.get("phase") == "Evicted" and started == event.generation:
                pass  # redelivered after we evicted: report again, the id dedupes it
            elif running is None and current is not None and started < event.generation:
                # Admitted but never started: its admission went to a watcher killed before
                # it started it (redelivered only after ack_wait). Nothing to stop, but the
                # eviction must be reported, or admission holds its quota for good (seen in
                # bench/failover.py); the status written below keeps a redelivered admission
                # of this generation from starting it.
                log.info("evict_never_started", workload=ref.key, generation=event.generation)
            else:
                log.info("evict_not_running", workload=ref.key, generation=event.generation)
                return
        else:
            self.running.pop(ref.uid, None)
            await self._stop(running)
        # The report first, as in _finish: it frees the quota a preemptor waits for. A restart
        # before the status write reports the same eviction again (same id: deduplicated).
        await self._publish(
            reporting.evicted(ref, event.generation, reason=event.reason, message=event.message)
        )
        current = self._current(ref)
        if current is not None:
            await self._set_status(
                current[0],
                {
                    "phase": "Evicted",
                    "generation": event.generation,
                    "pids": [],
                    "reason": event.reason,
                },
            )
        metrics.EVICTED.inc()
        log.info(
            "workload_evicted",
            workload=ref.key,
            queue=event.cluster_queue,
            reason=event.reason,
            generation=event.generation,
        )

    async def _stop(self, running: RunningPods | _Simulated) -> None:
        running.stopping = True
        if isinstance(running, RunningPods):
            await running.stop(grace=self.stop_grace)
        elif running.timer is not None:
            running.timer.cancel()

    async def _stop_everything(self) -> None:
        """On shutdown, nothing we started may outlive us; the next watcher requeues it."""
        running = list(self.running.values())
        self.running.clear()
        await asyncio.gather(*(self._stop(item) for item in running))

    # --- the watcher's Backend verbs (services/watcher/backend.py) ------------------------

    async def create(self, command: CreateWorkload | SubmitWorkload) -> None:
        await self._create(command)

    async def delete(self, command: DeleteWorkload | RemoveWorkload) -> None:
        await self._delete(command)

    async def admit(self, decision: WorkloadAdmitted) -> None:
        await self._start(decision)

    async def evict(self, decision: EvictionRequested) -> None:
        await self._evict(decision)

    async def observe(self) -> None:
        await self.run()

    # --- helpers --------------------------------------------------------------------------

    async def _publish(self, event: Event) -> None:
        await self.bus.publish(event)

    def _status(self, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """The recorded status of this object (not of an older one of the same name)."""
        status = self.statuses.get(key)
        return status if status is not None and status.get("uid") == obj["metadata"]["uid"] else {}

    async def _set_status(self, key: str, status: dict[str, Any]) -> None:
        await self._settle_statuses(await self._send_statuses([(key, status)]))

    async def _send_statuses(self, updates: list[tuple[str, dict[str, Any]]]) -> _StatusWrites:
        """Record statuses, all in flight at once; :meth:`_settle_statuses` awaits them.

        Only this process writes them, so no compare-and-swap: an object deleted meanwhile
        gets none (a write that races its deletion is dropped at the next start).
        """
        assert self.status_kv is not None
        writes = _StatusWrites()
        for key, change in updates:
            obj = self.objects.get(key)
            if obj is None:
                continue
            status = {**self._status(key, obj), **change}
            status["uid"] = obj["metadata"]["uid"]
            status["updated"] = _now_iso()
            self.statuses[key] = status
            writes.values.append((key, msgspec.json.encode(status)))
        writes.sent = await self.bus.send_key_updates(
            self.status_kv, [(key, value, None) for key, value in writes.values]
        )
        return writes

    async def _settle_statuses(self, writes: _StatusWrites) -> None:
        assert self.status_kv is not None
        outcomes = [] if writes.sent is None else await writes.sent.outcomes()
        for (key, _), outcome in zip(writes.values, outcomes, strict=True):
            if isinstance(outcome, AckTimeout):
                # Unknown whether it landed: write the newest status (never an older one).
                await self._rewrite_status(key)
            elif isinstance(outcome, Exception):
                raise outcome

    async def _rewrite_status(self, key: str) -> None:
        """Write a key's newest status until it is stored. Why retry: while a NATS cluster
        elects the status bucket's leader (a node killed) a write is refused for seconds;
        raising failed the finish round and stopped the service, and the runs it held were
        then reported by nobody (bench/failover.py). Stopping ends the retries."""
        assert self.status_kv is not None
        delay = 0.1
        while (newest := self.statuses.get(key)) is not None:
            try:
                await self.status_kv.put(key, msgspec.json.encode(newest))
                return
            except (nats.errors.Error, TimeoutError) as error:
                if self.runtime.stopping.is_set():
                    raise
                log.warning("status_write_retry", key=key, error=repr(error))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _forget_status(self, key: str) -> None:
        assert self.status_kv is not None
        if self.statuses.pop(key, None) is not None:
            await self.status_kv.delete(key)


class _StatusWrites:
    """Status writes in flight: (key, encoded status) and their acks to come."""

    def __init__(self) -> None:
        self.values: list[tuple[str, bytes]] = []
        self.sent: KeyUpdates | None = None


LocalPod = tuple[str, list[str], dict[str, str], str | None]  # name, argv, env, working dir
_Finish = tuple[str, WorkloadRef, int, int, str]  # key, workload, generation, exit code, message


def _phase(exit_code: int) -> str:
    return "Succeeded" if exit_code == 0 else "Failed"


def _local_pods(
    obj: dict[str, Any],
    pod_sets: list[PodSet],
    pod_specs: dict[str, dict[str, Any]],
    event: WorkloadAdmitted,
) -> list[LocalPod]:
    """The processes that stand for a workload's pods on this machine.

    A RayJob is one process: its ``entrypoint`` as a shell command, as the submitter pod
    would run it; its head and workers only hold quota. A pod group runs each of its Pods,
    named as they are. Every other kind runs each pod of each pod set (as admitted), its
    pod template's first container.
    """
    if obj.get("kind") == "RayJob":
        entrypoint = str((obj.get("spec") or {}).get("entrypoint") or "")
        return [("submitter-0", ["sh", "-c", entrypoint] if entrypoint else [], {}, None)]
    if obj.get("kind") == POD_GROUP_KIND:
        members = (obj.get("spec") or {}).get("pods") or []
        return [
            (str(pod["metadata"]["name"]), *_with_index(pod_commands(pod.get("spec") or {}), i))
            for i, pod in enumerate(members)
        ]
    pods: list[LocalPod] = []
    for pod_set in _admitted_pod_sets(pod_sets, event):
        argv, env, cwd = pod_commands(pod_specs[pod_set.name])
        for index in range(pod_set.count):
            env_for_pod = {**env, "BERTH_POD_INDEX": str(index), "JOB_COMPLETION_INDEX": str(index)}
            pods.append((f"{pod_set.name}-{index}", argv, env_for_pod, cwd))
    return pods


def _with_index(
    command: tuple[list[str], dict[str, str], str | None], index: int
) -> tuple[list[str], dict[str, str], str | None]:
    argv, env, cwd = command
    return argv, {**env, "BERTH_POD_INDEX": str(index)}, cwd


def _admitted_pod_sets(pod_sets: list[PodSet], event: WorkloadAdmitted) -> list[PodSet]:
    """The pod sets with the counts admission granted (partial admission may lower them)."""
    counts = {assignment.pod_set: assignment.count for assignment in event.assignments}
    return [
        msgspec.structs.replace(pod_set, count=counts.get(pod_set.name, pod_set.count))
        for pod_set in pod_sets
    ]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


def stop_grace_from_env() -> float:
    return float(os.environ.get("BERTH_POD_GRACE_SECONDS", "5"))
