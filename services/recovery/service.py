"""The recovery service: owns managed jobs, brings preempted ones back, keeps them from starving.

- ``berth.api.recovery.launch|cancel`` (request/reply): a launch is checked, given the next
  id, stored in the ``berth-jobs`` bucket, then its first attempt is requested from the
  watcher (``CreateWorkload``); the reply carries the id.
- A durable consumer follows the workloads' facts and admission's decisions; each job moves
  along (``lifecycle.advance``); commands are published first (deterministic ids), then the
  job is stored, then the batch is acked: a crash anywhere replays to the same result.
- Every second, each waiting preempted job's ageing boost is recomputed from its policy and
  published (``PriorityBoosted``) when it changes; admission reorders its queue with it. Every
  other workload ages too once one wait has lasted ``reserveAfter`` (``waiting.Waits``). At
  start, before it decides anything, it reads every wait back from the stream
  (``WAIT_HISTORY``): a restarted or failed-over recovery keeps every workload's clock.
- A standby replica only follows the config; all of the above starts once it leads
  (docs/replicas.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from functools import partial
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from services.recovery import lifecycle, metrics
from services.recovery.requests import CancelRequest, LaunchRequest, LaunchTask, next_id
from services.recovery.reserving import Reservations
from services.recovery.ticking import Announced, Tick, ageing_tick, forget_announced
from services.recovery.waiting import WAIT_HISTORY, WAIT_VERBS, Waits
from shared.bus import API_SUBJECT, JOBS_BUCKET, BusError, Served
from shared.config import ClusterQueue, ClusterQueuePolicy, config_key
from shared.config_mirror import ConfigMirror
from shared.deadletter import dead_letters
from shared.events import AnyEvent, CreateWorkload, Event, JobStatusChanged, PriorityBoosted
from shared.jobs import JobStatus, ManagedJob, PipelineTask, encode_job, job_key, load_jobs
from shared.logging import get_logger
from shared.metrics import sample_consumer_lag
from shared.service import Runtime
from shared.subjects import pending_reports_of

# The API's requests (services/recovery/requests.py), by their old address too.
__all__ = ["CancelRequest", "LaunchRequest", "LaunchTask", "RecoveryService", "subjects_for"]

log = get_logger("recovery")

# What its consumer is always sent: every workload fact a wait needs, admission's admitted
# and pending decisions; starts only while a managed job is under way (subjects_for).
WAIT_SUBJECTS = (
    *(f"berth.wl.{verb}.>" for verb in sorted(WAIT_VERBS)),
    "berth.cq.*.admitted.>",
    "berth.cq.*.pending.>",
)
STARTS = "berth.wl.started.>"
AGEING_TICK_SECONDS = 1.0


def subjects_for(jobs: Iterable[ManagedJob], *, batching: bool) -> list[str]:
    """What recovery's consumer is sent: every fact a wait needs, and ``WorkloadStarted``
    only while some managed job is not done; of the pending reports only admission's where
    they have their own subject (batches on: :func:`shared.subjects.pending_reports_of`).

    Why: a start moves only a managed job's attempt along (STARTING -> RUNNING); no wait
    reads it, so with no job under way every workload's start was decoded only to be
    dropped. A job asks for its workloads (``CreateWorkload``) only while it is not done, and
    its first is asked for after the consumer follows starts again (``RecoveryService._launch``),
    so none of its starts is stored before they are followed. Preemption's pending reports
    neither a wait nor a job reads (``waiting._pending``, ``lifecycle``: admission's only)."""
    waits = pending_reports_of("admission", WAIT_SUBJECTS, batching=batching)
    if any(not job.done for job in jobs):
        return [*waits, STARTS]
    return list(waits)


class RecoveryService:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.bus = runtime.bus
        self.jobs: dict[int, ManagedJob] = {}
        self.by_workload: dict[tuple[str, str], int] = {}  # (namespace, name) -> job id
        self.config = ConfigMirror()
        self.kv: KeyValue | None = None
        self.lock = asyncio.Lock()  # one writer at a time: API calls, the consumer, the tick
        self.reservations = Reservations()
        self.announced: Announced = {}  # attempt uid -> (boost, reserved) last announced
        self.waits = Waits()  # every workload's wait: each ages (docs/ageing.md)
        self.subscription: JetStreamContext.PullSubscription | None = None
        self.following: list[str] = []  # what this replica last set its consumer to
        self.tick: Tick | None = None  # the ageing tick's config lookups (_tick_lookups)

    @property
    def batching(self) -> bool:
        """Whether the services publish batches: what its consumers are sent follows."""
        return bool(self.bus.settings.batching)

    async def run(self) -> None:
        await self.config.start(self.runtime)
        if not await self.runtime.stand_by():  # a standby consumes nothing and answers nothing
            return
        self.kv = await self.bus.kv(JOBS_BUCKET, history=1)
        await self._load_jobs()
        history = pending_reports_of("admission", WAIT_HISTORY, batching=self.batching)
        waits = await self.bus.replay_once(history, self._rebuild)
        self.announced = {u: a for u, a in self.announced.items() if u in self.waits.waits}
        log.info("waits_rebuilt", events=waits, waiting=len(self.waits.waits))
        # Every workload's events: its wait ages; starts while a job is under way, and of
        # those a start of a workload no job owns is skipped by _on_events.
        self.following = subjects_for(self.jobs.values(), batching=self.batching)
        subscription = await self.bus.durable_subscription("recovery", self.following)
        self.subscription = subscription
        api = await self._serve_api()
        self.runtime.spawn(self._age(), name="recovery.ageing")
        lag = sample_consumer_lag(self.runtime, consumer="recovery")  # its durable consumer
        self.runtime.spawn(lag, name="recovery.lag")
        metrics.JOBS.read = lambda: metrics.job_samples(self.jobs.values())
        self.runtime.set_ready()
        try:
            await self.bus.consume(subscription, self._on_events, stopping=self.runtime.stopping)
        finally:
            await api.unsubscribe()

    # --- state ----------------------------------------------------------------------------

    async def _load_jobs(self) -> None:
        assert self.kv is not None
        letters = dead_letters(self.bus, self.runtime.name)  # a record that does not decode
        for job in await load_jobs(self.kv, malformed=partial(letters.send, "object")):
            self._index(job)
        log.info("jobs_loaded", jobs=len(self.jobs))

    def _rebuild(self, events: list[AnyEvent]) -> None:
        """Every wait from the stream's start; what it announced is not announced again.
        (The durable consumer then delivers again what it had not acknowledged: folding a
        fact twice changes nothing.)"""
        self.waits.apply_all(events)
        for event in events:
            if isinstance(event, PriorityBoosted) and event.source == "recovery":
                self.announced[event.workload.uid] = (event.boost, event.reserved)

    def _index(self, job: ManagedJob) -> None:
        self.jobs[job.id] = job
        for attempt in job.attempts:
            self._own_workload(job, attempt.name)

    def _unindex(self, job: ManagedJob) -> None:
        del self.jobs[job.id]
        for attempt in job.attempts:
            self.by_workload.pop((job.namespace, attempt.name), None)

    def _own_workload(self, job: ManagedJob, name: str) -> None:
        """Registered before the workload is asked for, so none of its events is skipped."""
        self.by_workload[(job.namespace, name)] = job.id

    def job_of(self, event: AnyEvent) -> int | None:
        """The id of the managed job whose attempt ``event`` is about, None for any other
        workload (its facts only age its wait)."""
        return self.by_workload.get((event.workload.namespace, event.workload.name))

    async def _save(self, jobs: list[ManagedJob]) -> None:
        assert self.kv is not None
        for job in jobs:
            await self.kv.put(job_key(job.id), encode_job(job))

    async def _next_id(self) -> int:
        assert self.kv is not None
        return await next_id(self.kv)

    # --- events ---------------------------------------------------------------------------

    async def _on_events(self, events: list[AnyEvent]) -> None:
        async with self.lock:
            self.waits.apply_all(events)  # every workload's facts age its wait
            if self.announced:
                forget_announced(self.announced, events)
            if not self.by_workload:
                return  # no managed job's workload: job_of is None for each, nothing to do
            now = time.time()
            outgoing: list[Event] = []
            changed: dict[int, ManagedJob] = {}
            job_of = self.job_of
            for event in events:
                job_id = job_of(event)
                if job_id is None:
                    continue
                job = self.jobs[job_id]
                before, recoveries = job.status, job.recoveries
                published = lifecycle.advance_safely(job, event, now)
                metrics.transition(job, before=before, recoveries_before=recoveries, now=now)
                if job.status == JobStatus.FAILED_CONTROLLER:
                    log.error("job_failed_controller", job=job.id, reason=job.message)
                changed[job.id] = job
                for item in published:
                    outgoing.append(item)
                    self._note(job, item)
            if not changed:
                return  # no managed job's event: nothing to publish, store or announce
            await self.bus.publish_many(outgoing)  # first: ids make a replay harmless
            await self._save(list(changed.values()))
            if any(job.status == JobStatus.RECOVERING for job in changed.values()):
                # A preempted job's ageing clock is announced now, not at the next tick:
                # preemption protects its next run from the moment it knows the clock.
                await self._publish_boosts(now)

    def _note(self, job: ManagedJob, event: Event) -> None:
        if isinstance(event, CreateWorkload):
            self._own_workload(job, event.workload.name)
        elif isinstance(event, JobStatusChanged):
            log.info(
                "job_status",
                job=job.id,
                workload=event.workload.key,
                queue=job.cluster_queue,
                status=event.status,
                recoveries=job.recoveries,
                reason=event.message,
            )

    async def _follow(self) -> None:
        """Refilter the consumer if what it should be sent (``subjects_for``) is not what
        it is sent; raises ``BusError`` if that fails (the consumer is then sent what it was).

        Why the server's filters are read while a job needs starts: the durable consumer is
        shared by the replicas, so a deposed leader's late refilter could drop the starts
        the new leader's job needs; the active replica's next tick sets it right. With no job
        under way a stale filter can only send starts it skips, so the last filter this
        replica set is compared instead (no request per tick)."""
        if self.subscription is None:
            return
        wanted = subjects_for(self.jobs.values(), batching=self.batching)
        if wanted == self.following and STARTS not in wanted:
            return
        if await self.bus.refilter(self.subscription, wanted):
            starts = STARTS in wanted
            why = "a managed job is under way" if starts else "no managed job under way"
            log.info("consumer_follows", workload="", queue="", starts=starts, reason=why)
        self.following = wanted

    # --- ageing ---------------------------------------------------------------------------

    async def _age(self) -> None:
        while not self.runtime.stopping.is_set():
            try:
                await asyncio.wait_for(self.runtime.stopping.wait(), AGEING_TICK_SECONDS)
                return
            except TimeoutError:
                pass
            if not self.runtime.is_active:
                continue  # its lease is suspended: no decisions until it is renewed
            async with self.lock:
                await self._publish_boosts(time.time())
                if not self.runtime.is_active:
                    continue  # suspended while publishing: a deposed replica refilters nothing
                try:
                    await self._follow()  # the last job ended: starts are no longer read
                except BusError as error:  # still sent starts: more read than needed
                    log.warning("refilter_failed", workload="", queue="", reason=str(error))

    async def _publish_boosts(self, now: float) -> None:
        """The ageing tick (services/recovery/ticking.py): its announcements published,
        then the jobs whose boost changed stored."""
        outgoing, changed = ageing_tick(
            now,
            tick=self._tick_lookups(),
            waits=self.waits,
            jobs=self.jobs.values(),
            reservations=self.reservations,
            announced=self.announced,
        )
        if outgoing:
            await self.bus.publish_many(outgoing)
            await self._save(changed)

    def _tick_lookups(self) -> Tick:
        """What the ageing tick looks up in the config (``Tick``: the ClusterQueues, the
        policies and what it found per ClusterQueue), made anew only when the config changed
        since the last tick (the mirror's ``changed``); a tick reads the same lookups until
        then. Why: made every second, it was a walk of every config object, a cost that grows
        with the cluster's config, for a config that changes rarely."""
        if self.config.take_change() or self.tick is None:
            queues = {cq.metadata.name: cq for cq in self.config.of_kind(ClusterQueue)}
            self.tick = Tick(policies=self.config.of_kind(ClusterQueuePolicy), queues=queues)
        return self.tick

    # --- API ------------------------------------------------------------------------------

    async def _serve_api(self) -> Served:
        async def answer(verb: str, data: bytes) -> dict[str, Any]:
            if verb == "launch":
                return await self._launch(msgspec.json.decode(data, type=LaunchRequest))
            if verb == "cancel":
                return await self._cancel(msgspec.json.decode(data, type=CancelRequest))
            return {"error": f"unknown request {verb!r}"}

        # Only the active replica subscribes; the queue group keeps a deposed one that has
        # not exited yet from answering too.
        return await self.bus.serve_requests(f"{API_SUBJECT}.recovery.*", answer, queue="recovery")

    async def _launch(self, request: LaunchRequest) -> dict[str, Any]:
        async with self.lock:
            now = time.time()
            job = ManagedJob(
                id=await self._next_id(),
                name=request.name,
                namespace=request.namespace,
                resources=request.resources,
                submitted_at=now,
                max_restarts_on_errors=request.max_restarts_on_errors,
                template=request.template,
                recover_on_exit_codes=request.recover_on_exit_codes,
                tasks=[PipelineTask(**msgspec.structs.asdict(task)) for task in request.tasks],
            )
            queue = request.queue_name or "default"
            if config_key("LocalQueue", queue, request.namespace) not in self.config:
                message = f"LocalQueue {queue!r} not found in namespace {request.namespace!r}"
                events = lifecycle.set_status(job, JobStatus.FAILED_PRECHECKS, message, now)
            else:
                events = lifecycle.first_attempt(job, now)
            self._index(job)
            try:
                await self._follow()  # its attempt's start must reach the consumer
                await self._save([job])  # stored before it is asked for: never lost once accepted
            except BaseException:
                self._unindex(job)  # refused: not held, as if never launched
                raise
            await self.bus.publish_many(events)
            for event in events:
                self._note(job, event)
            return {"id": job.id, "status": job.status.value, "message": job.message}

    async def _cancel(self, request: CancelRequest) -> dict[str, Any]:
        async with self.lock:
            matches = [
                job
                for job in self.jobs.values()
                if job.id == request.id or (request.name is not None and job.name == request.name)
            ]
            if not matches:
                return {"error": f"no managed job {request.id or request.name!r}"}
            cancelled = []
            for job in matches:
                if job.done:
                    continue
                events = lifecycle.cancel(job, time.time())
                await self.bus.publish_many(events)
                await self._save([job])
                cancelled.append(job.id)
            if not cancelled:
                return {"error": f"job {matches[0].id} already {matches[0].status.value}"}
            return {"cancelled": cancelled}
