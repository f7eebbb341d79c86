"""What the local backend runs: admitted workloads started as local processes (or simulated
runs), stopped on eviction, deletion or shutdown, and reported ``WorkloadStarted`` and
``WorkloadEvicted`` (finishes: :mod:`services.watcher.local.finishes`), and
``WorkloadPodsReady`` while waitForPodsReady is enabled (services/watcher/pods_ready_gate.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from services.watcher import metrics, reporting
from services.watcher.local.finishes import Finishes
from services.watcher.local.objects import find_object, simulated_seconds
from services.watcher.local.pods import local_pods
from services.watcher.local.processes import RunningPods, kill_leftover, workload_log_dir
from services.watcher.local.readiness import exec_probes, readiness_changes, wait_ready
from services.watcher.local.run_files import RunSetupError, prepare_run
from services.watcher.local.simulated import Clocks, Simulated
from services.watcher.local.statuses import StatusStore, StatusWrites
from services.watcher.pods_ready_gate import PodsReadyGate, as_it_stands
from shared.bus import SentEvents, Settling
from shared.events import (
    AnyEvent,
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadPodsReady,
    WorkloadRef,
    now,
)
from shared.logging import get_logger
from shared.service import Runtime
from shared.workloads import SIMULATED_RUNTIME_ANNOTATION, workload_spec

__all__ = ["Runs"]

log = get_logger("watcher.local")


class Runs:
    """The runs of this watcher: uid -> what runs (:attr:`running`). ``objects`` is the
    backend's map of bucket key -> object, read to find what a decision names."""

    def __init__(
        self,
        runtime: Runtime,
        store: StatusStore,
        objects: dict[str, dict[str, Any]],
        *,
        stop_grace: float,
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.objects = objects
        self.stop_grace = stop_grace
        self.log_root = Path(runtime.data_dir) / "logs"
        self.running: dict[str, RunningPods | Simulated] = {}  # uid -> what runs
        self.finishes = Finishes(runtime, store, self.running)
        self.clocks = Clocks(self._simulated_elapsed)
        self.pods_ready = PodsReadyGate()  # whether readiness is reported now

    # --- starting -------------------------------------------------------------------------

    async def start(self, event: WorkloadAdmitted) -> None:
        ref = event.workload
        current = find_object(self.objects, ref)
        if current is None:
            log.info("admitted_unknown_workload", workload=ref.key, generation=event.generation)
            return
        key, obj = current
        status = self.store.of(key, obj)
        if int(status.get("generation", 0)) >= event.generation or ref.uid in self.running:
            return  # redelivered: this generation was already started
        run = self.simulated_run(event)
        if run is not None:
            await (await self.start_simulated([run]))
            return
        finish = self.finishes.finish
        spec = workload_spec(obj)
        pods = local_pods(obj, spec.pod_sets, spec.pod_specs, event)
        if any(not argv for _, argv, _, _ in pods):
            await finish(
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
                self.runtime.bus, obj, spec.pod_specs, pods, run_dir=run_dir / str(event.generation)
            )
        except RunSetupError as error:
            await finish(key, ref, event.generation, 127, str(error))
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
            await finish(key, ref, event.generation, 127, f"cannot start process: {error}")
            return
        self.running[ref.uid] = running
        await self.store.set(
            key, {"phase": "Running", "generation": event.generation, "pids": running.pids}
        )
        await self.runtime.bus.publish(reporting.started(ref, event.generation))
        metrics.STARTED.inc()
        self.runtime.spawn(
            self._report_ready(ref, spec.pod_specs, running), name=f"ready-{ref.key}"
        )
        log.info(
            "workload_started",
            workload=ref.key,
            queue=event.cluster_queue,
            pods=len(pods),
            generation=event.generation,
        )
        self.runtime.spawn(self._await_exit(key, ref, running), name=f"run-{ref.key}")

    async def _report_ready(
        self, ref: WorkloadRef, pod_specs: dict[str, dict[str, Any]], running: RunningPods
    ) -> None:
        """Report PodsReady once the processes have started and passed their exec readiness
        probes (services/watcher/local/readiness.py); never for a run already stopped; only
        while waitForPodsReady is enabled (:meth:`_ready_now`)."""
        probes, skipped = exec_probes(pod_specs)
        if skipped:
            log.warning(
                "probe_ignored",
                workload=ref.key,
                containers=skipped,
                reason="the local backend runs only exec readiness probes",
            )

        def still() -> bool:
            return self.running.get(ref.uid) is running and not running.stopping

        if not await wait_ready(probes, running=still):
            return
        for report in self._ready_now(running, reporting.pods_ready(ref, running.generation)):
            await self.runtime.bus.publish(report)
        log.info("pods_ready", workload=ref.key, generation=running.generation)
        # Then each loss (a process fails while others run, a probe fails) and recovery.
        processes = [(pod.name, pod.process) for pod in running.pods]
        async for ready, why in readiness_changes(processes, probes, running=still):
            change = reporting.pods_ready(ref, running.generation, ready=ready, first=False)
            for report in self._ready_now(running, change):
                await self.runtime.bus.publish(report)
            event = "pods_ready" if ready else "pods_not_ready"
            log.info(event, workload=ref.key, generation=running.generation, reason=why)

    def _ready_now(self, run: RunningPods, report: WorkloadPodsReady) -> list[WorkloadPodsReady]:
        """The report to send now: while reports are on; while they are off, none, the
        readiness it says kept with its run instead (pods_ready_gate.py)."""
        if self.pods_ready.open:
            return [report]
        run.unreported_ready = (report.workload, report.ready)
        return []

    def held_ready(self) -> list[WorkloadPodsReady]:
        """Each running admission's readiness seen while reports were off, as it stands
        (``pods_ready_gate.as_it_stands``), taken: a simulated run is ready from its start."""
        at, held = now(), []
        for run in self.running.values():
            if isinstance(run, Simulated):
                if not run.stopping:
                    held += as_it_stands(run.ref, run.generation, True, at)
            elif run.unreported_ready is not None:
                ref, ready = run.unreported_ready
                held += as_it_stands(ref, run.generation, ready, at)
                run.unreported_ready = None
        return held

    def simulated_run(self, event: AnyEvent) -> tuple[Simulated, float] | None:
        """The run to start for an admission of a simulated workload not started yet."""
        if not isinstance(event, WorkloadAdmitted):
            return None
        current = find_object(self.objects, event.workload)
        if current is None or event.workload.uid in self.running:
            return None
        key, obj = current
        annotations = obj["metadata"].get("annotations") or {}
        seconds = annotations.get(SIMULATED_RUNTIME_ANNOTATION)
        status = self.store.of(key, obj)
        if seconds is None or int(status.get("generation", 0)) >= event.generation:
            return None
        return Simulated(key, event.workload, event.generation), simulated_seconds(seconds)

    async def start_simulated(self, runs: list[tuple[Simulated, float]]) -> Settling:
        """Start the runs' clocks and send their statuses and Started reports; returns what
        awaits the acks (and only then lets the runs' finishes be reported)."""
        loop = asyncio.get_running_loop()
        for run, seconds in runs:
            self.running[run.ref.uid] = run
            # The clock starts now, as a process would: the status write and the report are
            # bookkeeping, and awaiting them first would hold the quota that much longer.
            self.clocks.start(run, seconds, loop)
        try:
            # Statuses and reports in flight together: one round trip for the batch.
            writes = await self.store.send(
                [
                    (run.key, {"phase": "Running", "generation": run.generation, "pids": []})
                    for run, _ in runs
                ]
            )
            at = now()  # the round's reports share their moment (reporting.py)
            # Ready as they start; while reports are off, held_ready says so once on.
            ready = self.pods_ready.open
            reports = await self.runtime.bus.send_many(
                [reporting.started(r.ref, r.generation, at=at) for r, _ in runs]
                + [reporting.pods_ready(r.ref, r.generation, at=at) for r, _ in runs if ready]
            )
        except BaseException:
            self._announce_runs(runs)
            raise
        return self._settle_started(runs, writes, reports)

    async def _settle_started(
        self, runs: list[tuple[Simulated, float]], writes: StatusWrites, reports: SentEvents
    ) -> None:
        try:
            await reports.settle()
            await self.store.settle(writes)
        finally:
            self._announce_runs(runs)
        metrics.STARTED.inc(len(runs))

    def _announce_runs(self, runs: list[tuple[Simulated, float]]) -> None:
        for run, _ in runs:  # even on failure: a finish must never wait forever
            run.announced = True
            if run.elapsed:
                self.finishes.queue(run)

    def _simulated_elapsed(self, run: Simulated) -> None:
        run.elapsed = True
        if run.announced:
            self.finishes.queue(run)

    async def _await_exit(self, key: str, ref: WorkloadRef, running: RunningPods) -> None:
        outcomes = await running.wait()
        if running.stopping or self.running.get(ref.uid) is not running:
            return  # evicted or deleted: that path reports it
        failed = [outcome for outcome in outcomes if outcome.exit_code != 0]
        code = failed[0].exit_code if failed else 0
        message = f"pod {failed[0].pod} exited with code {code}" if failed else ""
        await self.finishes.finish(key, ref, running.generation, code, message)

    # --- stopping -------------------------------------------------------------------------

    async def evict(self, event: EvictionRequested) -> None:
        ref = event.workload
        running = self.running.get(ref.uid)
        if running is None or running.generation != event.generation:
            current = find_object(self.objects, ref)
            status = self.store.of(*current) if current else {}
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
            await self.stop(running)
        # The report first, as in a finish: it frees the quota a preemptor waits for. A
        # restart before the status write reports the same eviction again (deduplicated).
        await self.runtime.bus.publish(
            reporting.evicted(ref, event.generation, reason=event.reason, message=event.message)
        )
        current = find_object(self.objects, ref)
        if current is not None:
            await self.store.set(
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

    async def orphaned(self, key: str, obj: dict[str, Any]) -> None:
        """A workload a previous watcher ran: stop what is left of it and report it evicted.

        The report before the status, as for a finish (finishes.py): an Evicted status
        stored first, then a kill, left a workload no later watcher reported, its quota
        held. A kill in between now reports the eviction again (same fact: ignored)."""
        status = self.store.of(key, obj)
        generation = int(status.get("generation", 0))
        kill_leftover([int(pid) for pid in status.get("pids") or []])
        await self.runtime.bus.publish(
            reporting.evicted(
                reporting.ref_of(obj),
                generation,
                reason="WatcherRestarted",
                message="the watcher restarted while the workload ran; it is queued again",
            )
        )
        await self.store.set(key, {"phase": "Evicted", "reason": "WatcherRestarted"})

    async def deleted(self, ref: WorkloadRef) -> bool:
        """The object is gone: stop what runs of it. True if something ran."""
        running = self.running.pop(ref.uid, None)
        if running is not None:
            await self.stop(running)
        return running is not None

    async def stop(self, running: RunningPods | Simulated) -> None:
        running.stopping = True  # a simulated run's clock skips it (simulated.Clocks)
        if isinstance(running, RunningPods):
            await running.stop(grace=self.stop_grace)

    async def stop_everything(self) -> None:
        """On shutdown, nothing we started may outlive us; the next watcher requeues it."""
        running = list(self.running.values())
        self.running.clear()
        await asyncio.gather(*(self.stop(item) for item in running))
