"""Kueue's scheduler performance benchmark, reproduced on the live Berth stack.

    .venv/bin/python bench/kueue_scheduler.py --config baseline|large-scale [--scale 0.1] [--console]

Starts ``berth up`` programmatically (nats-server and the four services as processes), writes
the scenario's ResourceFlavor, ClusterQueues (in cohorts), Namespaces and LocalQueues into the
config bucket, then runs three independent creation streams per ClusterQueue (sleep the
interval, then create the Job in the objects bucket, as Kueue's generator does). Each Job is
annotated with its simulated run time, so the watcher starts it at admission and finishes it
after that time; a preempted Job starts from zero when it is admitted again. The run ends when
every workload has finished; then the event log is read and checked (quota never
over-committed) and the metrics are printed beside Kueue's published figures and the ideal
schedule (bench/kueue_ideal.py). The per-workload timeline goes to bench/out/.

``--console`` also starts the web console (as `berth up` does) and keeps one client on the
overview's server-sent-event stream for the whole run, to show what a watching operator costs
admission (docs/console.md, "Cost").

Metrics (see /work/shared/KUEUE-PERF-BENCH.md): wall time (the services' start to their exit;
NATS, like Kueue's envtest, is up before the clock starts);
pooled ClusterQueue usage as Kueue's checker computes it (admitted CPU x time over nominal x
window); goodput (useful CPU-seconds over the same denominator); average time to admission
per class (creationTimestamp to the last admission, millisecond resolution); evictions per
class; admissions per second at peak (1 s bins); CPU seconds and peak RSS of each process.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import gc
import os
import re
import resource
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import msgspec
from rich.console import Console

from bench.eventlog import (
    Published,
    published_by_subject,
    quota_violations,
    read_events,
)
from bench.kueue_config import CONFIGS, ScenarioConfig
from bench.kueue_ideal import IdealResult, simulate_ideal
from bench.objects import (
    FLAVOR,
    SimulatedJobs,
    cpu_cluster_queue,
    creation_timestamp,
    queue_namespace,
    uuid4_strings,
)
from berth_cli.up import CONSOLE, Stack
from shared.bus import (
    CONFIG_BUCKET,
    OBJECTS_BUCKET,
    Bus,
    BusSettings,
    BusTimeout,
    KeyExists,
    KeyNotFound,
)
from shared.config import encode_object, object_key, parse_object
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadStarted,
    encode_event,
)
from shared.gc_tuning import tune_gc
from shared.subjects import batch_subject
from shared.workloads import workload_key

__all__ = ["SERVICE_NAMES", "RunResult", "main", "run_benchmark"]

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
CLASS_LABEL = "berth.dev/bench-class"
RUNTIME_LABEL = "berth.dev/bench-runtime-ms"
# Published ideal figures (spec section 6); the simulated ideal is computed, these are quoted.
SPEC_IDEAL = {
    "baseline": {"wall": 67.0, "small": 19.5, "medium": 16.1, "large": 0.7},
    "large-scale": {"wall": 4.6, "small": 2.0, "medium": 1.4, "large": 0.1},
}
SERVICE_NAMES = ("admission", "preemption", "watcher", "recovery")
# This process to the end of the run: its imports and the ideal schedule as well as the drive.
GENERATOR = "bench (generator, whole process)"
# The machine is shared: printed under every run, with the load average at its end.
LOAD_CAVEAT = (
    "Caveat: load average at the end {load} (1/5/15 min) on a shared machine; other work"
    " inflates wall time more than CPU per workload."
)
GOALS = {
    "baseline": {"wall": 77.0, "small": 25.0, "medium": 21.0, "large": 2.0},
    "large-scale": {"wall": 60.0},
}


# --- objects ------------------------------------------------------------------------------


def config_documents(config: ScenarioConfig) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = [FLAVOR]
    for cq, cohort in config.cluster_queues():
        queue = cpu_cluster_queue(
            cq,
            config.nominal_cpu,
            cohort=cohort,
            borrowing_limit=config.borrowing_limit_cpu,
            preemption={
                "reclaimWithinCohort": config.reclaim_within_cohort,
                "withinClusterQueue": config.within_cluster_queue,
            },
        )
        queue["spec"]["queueingStrategy"] = "StrictFIFO" if config.strict_fifo else "BestEffortFIFO"
        queue["spec"]["flavorFungibility"] = {
            "whenCanBorrow": "MayStopSearch",
            "whenCanPreempt": "TryNextFlavor",
        }
        documents += [queue, *queue_namespace(cq)]
    admission: dict[str, Any] = {}
    if config.borrowing_yields:
        admission["borrowingYieldsToHigherPriority"] = True
    if config.wait_targets:
        admission["waitTargets"] = [
            {"wait": wait} if floor is None else {"minPriority": floor, "wait": wait}
            for floor, wait in config.wait_targets
        ]
    if admission:
        documents.append(
            {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "Configuration",
                "metadata": {"name": "berth"},
                "spec": {"admission": admission},
            }
        )
    return documents


def parse_wait_targets(text: str) -> tuple[tuple[int | None, str], ...]:
    """``200=2s,100=21s,25s``: minPriority=wait, or a wait alone for every other workload."""
    targets: list[tuple[int | None, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        floor, _, wait = item.rpartition("=")
        try:
            targets.append((int(floor) if floor else None, wait))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid wait target {item!r} (use PRIORITY=WAIT or WAIT, e.g. 200=2s,25s)"
            ) from None
    return tuple(targets)


# --- the run ------------------------------------------------------------------------------


@dataclass
class Created:
    uid: str
    name: str
    cluster_queue: str
    cohort: str
    klass: str
    cpu: int
    runtime_ms: int
    created: float  # epoch seconds, = metadata.creationTimestamp


def created_records(
    config: ScenarioConfig, made: list[tuple[str, int, str, str, str]]
) -> list[Created]:
    """The creates' records, built after the run from what each create kept: (ClusterQueue,
    class index, name, uid, creationTimestamp)."""
    cohort_of = dict(config.cluster_queues())
    records: list[Created] = []
    for cq, set_index, name, uid, stamp in made:
        klass = config.classes[set_index]
        records.append(
            Created(
                uid=uid,
                name=name,
                cluster_queue=cq,
                cohort=cohort_of[cq],
                klass=klass.name,
                cpu=klass.request_cpu,
                runtime_ms=klass.runtime_ms,
                created=datetime.fromisoformat(stamp).timestamp(),
            )
        )
    return records


@dataclass
class DriveResult:
    t_config: float  # epoch seconds when the first config object was written
    # What each create kept, in their order (created_records). Not in the repr: asyncio.run
    # writes its task's result twice on leaving (restoring SIGINT's handler), inside the
    # run's wall time.
    made: list[tuple[str, int, str, str, str]] = field(repr=False)
    done: float  # epoch seconds when the last finish was seen
    ready: float  # time.monotonic() when every service was ready
    # This process's CPU s (every thread: the readiness poll too) from the drive's start to
    # the last create, and to its end (the last finish seen).
    cpu_creating: float
    cpu: float
    console_messages: int | None = None  # server-sent events read from the console, if any


FINISHED_FAMILY = "wl.finished"  # the watcher's finished reports (docs/events.md, Batches)


class _Finished(msgspec.Struct):
    class _Ref(msgspec.Struct):
        uid: str

    workload: _Ref


async def follow_console(stack: Stack, ready: asyncio.Task[float], counter: list[int]) -> None:
    """One browser on the overview: once the stack is ready, read the console's
    server-sent-event stream (``/stream/``, the overview's) until cancelled, counting the
    messages in ``counter[0]``."""
    await asyncio.shield(ready)
    port = next(s.port for s in stack.services if s.role == CONSOLE)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}/stream/") as response,
    ):
        response.raise_for_status()
        async for line in response.content:  # one line at a time, as a browser parses them
            if line.startswith(b"event:"):
                counter[0] += 1


class Pacer:
    """A client-side limit on creations shared by every stream, as Kueue's generator has
    (client-go's QPS, 50 creations/s in its published runs): each create waits for its slot.
    A workload's creation time is stamped after the wait, as the API server stamps it."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self.next = time.monotonic()

    async def wait(self) -> None:
        now = time.monotonic()
        slot = max(self.next, now)
        self.next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


async def drive(
    url: str,
    config: ScenarioConfig,
    stack: Stack,
    *,
    limit_s: float,
    creations_per_s: float | None = None,
) -> DriveResult:
    cpu_start = time.process_time()
    readiness = asyncio.create_task(_ready_at(stack))
    console_messages = [0]
    follower = (
        asyncio.create_task(follow_console(stack, readiness, console_messages))
        if stack.with_console
        else None
    )
    bus = await Bus.connect(url, source="bench", auth=stack.admin_auth)  # admin may do anything
    try:
        objects_kv = await bus.kv(OBJECTS_BUCKET)
        total = config.total_workloads
        finished: set[str] = set()
        all_done = asyncio.Event()
        batched = BusSettings.from_env().batching
        # With batches on, the generator reads the record (one message per watcher round)
        # rather than the per-workload copies: a copy per finish delivered to this process
        # cost it and nats-server a message each, CPU the stack under test then lacked.
        decode_batch = msgspec.json.Decoder(list[_Finished]).decode
        decode_one = msgspec.json.Decoder(_Finished).decode

        async def on_finished(msg: Any) -> None:
            for event in decode_batch(msg.data) if batched else [decode_one(msg.data)]:
                finished.add(event.workload.uid)
            if len(finished) >= total:
                all_done.set()

        subscription = await bus.nc.subscribe(
            batch_subject(FINISHED_FAMILY) if batched else "berth.wl.finished.>", cb=on_finished
        )

        t_config = time.time()
        await write_config(bus, config_documents(config))

        # Per create only what a client does (the request's bytes, the call); the records
        # are built after the run from what each create kept (created_records).
        made: list[tuple[str, int, str, str, str]] = []
        cpu_creating = 0.0  # the generator's CPU to its last create
        pacer = None if creations_per_s is None else Pacer(creations_per_s)

        async def stream(cq: str, set_index: int) -> None:
            nonlocal cpu_creating
            klass = config.classes[set_index]
            interval = klass.interval_ms / 1000.0
            jobs = SimulatedJobs(
                cq,
                klass.runtime_ms,
                cpu=str(klass.request_cpu),
                priority=klass.priority,
                labels={CLASS_LABEL: klass.name, RUNTIME_LABEL: str(klass.runtime_ms)},
            )
            names = [f"{klass.name}-{set_index}-{seq}-0" for seq in range(klass.count)]
            uids = uuid4_strings(klass.count)
            for name, uid in zip(names, uids, strict=True):
                await asyncio.sleep(interval)  # sleep the interval, then create (Kueue's loop)
                if pacer is not None:
                    await pacer.wait()
                stamp = creation_timestamp()
                # A create is an update of a key that must not exist yet (revision 0); through
                # the bus's pipelined publishes, the generator's own CPU stays out of the way.
                await create(objects_kv, workload_key(cq, name), jobs.encode(name, uid, stamp))
                made.append((cq, set_index, name, uid, stamp))
                if len(made) == total:
                    cpu_creating = time.process_time() - cpu_start

        async def create(kv: Any, key: str, data: bytes) -> None:
            """Create the key; an unanswered create (a loaded server) is read back and sent
            again only if it was not stored, so a stream never ends on a lost ack."""
            for _ in range(10):
                try:
                    await bus.update_key(kv, key, data, last=0)
                    return
                except KeyExists:
                    return  # an earlier unanswered attempt was stored
                except BusTimeout:
                    try:
                        await kv.get(key)
                        return
                    except KeyNotFound:
                        continue
            raise RuntimeError(f"could not create {key}: ten attempts went unanswered")

        streams = [
            asyncio.create_task(stream(cq, index))
            for cq, _ in config.cluster_queues()
            for index in range(len(config.classes))
        ]
        deadline = time.monotonic() + limit_s
        while not all_done.is_set():
            for service in stack.services:
                assert service.process is not None
                if service.process.poll() is not None:
                    raise RuntimeError(
                        f"{service.name} exited with {service.process.returncode};"
                        f" see {service.log_path}"
                    )
            for task in streams:  # a stream that failed would leave the run waiting for good
                if task.done() and task.exception() is not None:
                    task.result()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {len(finished)} of {total} workloads finished within {limit_s:.0f}s"
                )
            if follower is not None and follower.done():
                follower.result()  # the console's stream ended early: raise what ended it
                raise RuntimeError("the console ended its event stream during the run")
            try:
                await asyncio.wait_for(all_done.wait(), timeout=1.0)
            except TimeoutError:
                pass
        done = time.time()
        cpu = time.process_time() - cpu_start
        await asyncio.gather(*streams)
        await subscription.unsubscribe()
        ready = await readiness
        return DriveResult(
            t_config,
            made,
            done,
            ready,
            cpu_creating,
            cpu,
            console_messages[0] if follower is not None else None,
        )
    finally:
        if follower is not None:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        if not readiness.done():
            readiness.cancel()
        await asyncio.gather(readiness, return_exceptions=True)
        await bus.close()


async def write_config(bus: Bus, documents: list[dict[str, Any]]) -> None:
    """Write the config bucket's objects, pipelined: every put in flight at once, one round
    trip for all, through the bus's acks (not a request and its timer each, generator CPU
    the stack under test would lack)."""
    kv = await bus.kv(CONFIG_BUCKET)
    objects = [parse_object(d) for d in documents]
    sending = await bus.send_key_updates(
        kv, [(object_key(o), encode_object(o), None) for o in objects]
    )
    for outcome in await sending.outcomes():
        if isinstance(outcome, Exception):
            raise outcome


async def _ready_at(stack: Stack) -> float:
    """When every service answered ready (polled in a thread beside the generator)."""
    await asyncio.to_thread(stack.wait_ready, timeout=30.0)
    return time.monotonic()


@contextmanager
def services_collector() -> Iterator[None]:
    """The generator's garbage collector while it drives the stack: the services' setting
    (shared/gc_tuning.py, ``BERTH_GC_TUNING`` as theirs), Python's again on leaving. With
    Python's, a young collection every 700 allocations and the older ones they lead to, over
    the streams' tasks and futures in flight and the creates' records, were a large part of
    the generator's CPU, which the stack under test then lacked."""
    before = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextmanager
def ready_stack(prefix: str) -> Iterator[Stack]:
    """A stack of its own (NATS and the four services, no console) on a temporary folder,
    ready; stopped and removed on leaving."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        stack = Stack(
            data_dir=Path(tmp), nats_port=0, console=Console(quiet=True), with_console=False
        )
        try:
            stack.start_nats()
            stack.spawn_services()
            stack.wait_ready(timeout=30.0)
            yield stack
        finally:
            stack.stop()


def services_cpu(stack: Stack) -> float:
    """The four services' CPU seconds so far (user + system)."""
    return sum(
        proc_stats(service.process.pid)[0]
        for service in stack.services
        if service.process is not None and service.role in SERVICE_NAMES
    )


def idle_startup_cpu() -> float:
    """The four services' CPU seconds from their start to readiness on an idle stack of its
    own (imports, connecting, creating their consumers): the fixed cost every run's CPU
    figures include, measured apart because a run's services read events before they are
    ready."""
    with ready_stack("berth-bench-idle-") as stack:
        return services_cpu(stack)


async def stream_messages(url: str, stack: Stack) -> dict[str, int]:
    """Messages JetStream stored per stream over the run (each stream's last sequence: the
    stack is new, so every sequence number is one message of this run, including KV writes
    later overwritten)."""
    bus = await Bus.connect(url, source="bench", auth=stack.admin_auth)
    try:
        return {
            info.config.name or "?": info.state.last_seq for info in await bus.js.streams_info()
        }
    finally:
        await bus.close()


_READ_LINE = re.compile(r"^berth_bus_messages_read_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


async def consumer_reads(
    stack: Stack, *, settle_s: float = 1.0, within_s: float = 30.0
) -> dict[str, dict[str, tuple[int, int]]]:
    """What each service's consumers were sent and decoded over the run, per subject family
    (their ``berth_bus_messages_read_total``): service -> subject -> (delivered, decoded).
    Read again every ``settle_s`` until nothing changes (a service still behind the stream
    when the last workload finished catches up first), for at most ``within_s``. Ordered
    consumers and bucket watches are not counted."""
    reads = await _scrape_reads(stack)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        await asyncio.sleep(settle_s)
        again = await _scrape_reads(stack)
        if again == reads:
            break
        reads = again
    return reads


async def _scrape_reads(stack: Stack) -> dict[str, dict[str, tuple[int, int]]]:
    reads: dict[str, dict[str, tuple[int, int]]] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for service in stack.services:
            if service.role not in SERVICE_NAMES:
                continue
            async with session.get(f"{service.url}/metrics") as response:
                text = await response.text()
            subjects = reads.setdefault(service.name, {})
            for line in text.splitlines():
                match = _READ_LINE.match(line)
                if match is None:
                    continue
                labels = dict(_LABEL.findall(match["labels"]))
                delivered, decoded = subjects.get(labels["subject"], (0, 0))
                count = int(float(match["value"]))
                if labels["stage"] == "delivered":
                    delivered += count
                else:
                    decoded += count
                subjects[labels["subject"]] = (delivered, decoded)
    return reads


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds user+system, peak RSS in MiB) of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        hwm = 0.0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
        return cpu, hwm
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan")


@dataclass
class RunResult:
    config: ScenarioConfig
    wall: float
    startup: float
    idle_startup_cpu: float | None  # the four services' CPU s to readiness on an idle stack
    drain_stop: float
    window: float
    usage_pct: float
    goodput_pct: float
    avg_wait: dict[str, float]
    max_wait: dict[str, float]
    evictions: dict[str, int]
    peak_admissions_per_s: int
    processes: dict[str, tuple[float, float]]
    avg_first_wait: dict[str, float]
    bus_messages: dict[str, int]
    violations: int
    peak_cohort_cpu: float
    cohort_limit_cpu: float
    workloads: int
    finished: int
    events: int
    creation_span: float
    timeline: Path | None
    ideal: IdealResult
    by_type: dict[str, int]
    start_lag: tuple[float, float, int]  # mean, p99, samples
    overhold: tuple[float, float, int]
    notes: list[str] = field(default_factory=list)
    console_messages: int | None = None  # None: run without the console
    creations_per_s: float | None = None  # the generator's client limit, if any
    published: dict[str, Published] = field(default_factory=dict)  # subject family -> events
    reads: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)  # see above
    generator_cpu: tuple[float, float] | None = None  # DriveResult's cpu_creating, cpu


def _mean_p99(values: list[float]) -> tuple[float, float, int]:
    if not values:
        return (0.0, 0.0, 0)
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (sum(ordered) / len(ordered), p99, len(ordered))


def _mean_p99_text(figures: tuple[float, float, int]) -> str:
    """Mean / p99 in ms; a p99 of fewer than 1,000 samples would not mean what it says."""
    mean, p99, samples = figures
    if samples < 1_000:
        return f"{mean * 1000:,.0f} / - (p99 needs 1,000 samples, {samples:,} here)"
    return f"{mean * 1000:,.0f} / {p99 * 1000:,.0f} ({samples:,} samples)"


def compute(
    config: ScenarioConfig,
    drive_result: DriveResult,
    created: list[Created],
    events: list[AnyEvent],
) -> dict[str, Any]:
    by_uid = {c.uid: c for c in created}
    admissions: dict[str, list[float]] = defaultdict(list)
    started: dict[str, float] = {}
    finished_at: dict[str, float] = {}
    evicted: dict[str, int] = defaultdict(int)
    holding: dict[str, tuple[int, float]] = {}  # uid -> (generation, admitted at)
    cpu_time = 0.0  # CPU-seconds of quota held (Kueue's usage integral, pooled)
    last_event = drive_result.t_config
    seen_evictions: set[tuple[str, int]] = set()
    admit_times: list[float] = []
    by_type: dict[str, int] = defaultdict(int)
    start_lag: list[float] = []  # admitted -> started (the watcher's reaction)
    overhold: list[float] = []  # quota held beyond the run time, per finished run
    last_admit: dict[str, float] = {}
    for event in events:
        by_type[f"{type(event).__name__}/{event.source}"] += 1
        uid = event.workload.uid
        info = by_uid.get(uid)
        if info is None:
            continue
        t = event.time.timestamp()
        if isinstance(event, WorkloadAdmitted):
            held = holding.get(uid)
            if held is not None and held[0] >= event.generation:
                continue
            holding[uid] = (event.generation, t)
            last_admit[uid] = t
            admissions[uid].append(t)
            admit_times.append(t)
            last_event = max(last_event, t)
        elif isinstance(event, WorkloadFinished | WorkloadEvicted):
            held = holding.get(uid)
            if held is None or held[0] != event.generation:
                continue
            del holding[uid]
            cpu_time += info.cpu * max(0.0, t - held[1])
            last_event = max(last_event, t)
            if isinstance(event, WorkloadFinished):
                finished_at[uid] = t
                overhold.append(t - held[1] - info.runtime_ms / 1000.0)
            elif (uid, event.generation) not in seen_evictions:
                seen_evictions.add((uid, event.generation))
                evicted[info.klass] += 1
        elif isinstance(event, WorkloadStarted):
            started[uid] = t
            if uid in last_admit:
                start_lag.append(t - last_admit[uid])
    window = max(1e-9, last_event - drive_result.t_config)
    nominal = config.nominal_cpu * config.cohorts * config.cqs_per_cohort
    useful = sum(by_uid[uid].cpu * by_uid[uid].runtime_ms / 1000.0 for uid in finished_at)
    waits: dict[str, list[float]] = defaultdict(list)
    first_waits: dict[str, list[float]] = defaultdict(list)
    for uid, times in admissions.items():
        info = by_uid[uid]
        waits[info.klass].append(times[-1] - info.created)
        first_waits[info.klass].append(times[0] - info.created)
    bins: dict[int, int] = defaultdict(int)
    for t in admit_times:
        bins[int(t - drive_result.t_config)] += 1
    cq_limit = {
        cq: (config.nominal_cpu + config.borrowing_limit_cpu) * 1000
        for cq, _ in config.cluster_queues()
    }
    cohort_of = dict(config.cluster_queues())
    cohort_limit = {
        cohort: config.nominal_cpu * config.cqs_per_cohort * 1000 for cohort in cohort_of.values()
    }
    violations, peak = quota_violations(
        events, cq_limit=cq_limit, cohort_of=cohort_of, cohort_limit=cohort_limit
    )
    return {
        "window": window,
        "usage_pct": 100.0 * cpu_time / (nominal * window),
        "goodput_pct": 100.0 * useful / (nominal * window),
        "avg_wait": {k: sum(v) / len(v) for k, v in waits.items()},
        "max_wait": {k: max(v) for k, v in waits.items()},
        "avg_first_wait": {k: sum(v) / len(v) for k, v in first_waits.items()},
        "evictions": {c.name: evicted.get(c.name, 0) for c in config.classes},
        "peak_admissions_per_s": max(bins.values(), default=0),
        "violations": violations,
        "peak_cohort_cpu": max(peak.values(), default=0) / 1000,
        "cohort_limit_cpu": config.nominal_cpu * config.cqs_per_cohort,
        "finished": len(finished_at),
        "by_type": dict(sorted(by_type.items(), key=lambda item: -item[1])),
        "start_lag": _mean_p99(start_lag),
        "overhold": _mean_p99(overhold),
        "rows": [
            (
                c.uid,
                c.name,
                c.cluster_queue,
                c.cohort,
                c.klass,
                c.cpu,
                c.runtime_ms,
                round(c.created - drive_result.t_config, 4),
                round(admissions[c.uid][0] - drive_result.t_config, 4)
                if admissions.get(c.uid)
                else "",
                round(admissions[c.uid][-1] - drive_result.t_config, 4)
                if admissions.get(c.uid)
                else "",
                len(admissions.get(c.uid, [])),
                round(started[c.uid] - drive_result.t_config, 4) if c.uid in started else "",
                round(finished_at[c.uid] - drive_result.t_config, 4)
                if c.uid in finished_at
                else "",
            )
            for c in created
        ],
    }


def run_benchmark(
    config: ScenarioConfig,
    *,
    data_dir: Path | None = None,
    out_dir: Path | None = OUT,
    timeout: float = 900.0,
    label: str | None = None,
    with_console: bool = False,
    creations_per_s: float | None = None,
    save_events: Path | None = None,
    measure_startup: bool = True,
) -> RunResult:
    ideal = simulate_ideal(config)
    owned_tmp = None
    if data_dir is None:
        owned_tmp = tempfile.TemporaryDirectory(prefix="berth-bench-")
        data_dir = Path(owned_tmp.name)
    stack = Stack(
        data_dir=data_dir, nats_port=0, console=Console(quiet=True), with_console=with_console
    )
    stopped_in = 0.0
    try:
        # As Kueue's runner: the store (envtest there, NATS here) is up before the clock
        # starts; the scheduler's processes and the generator start together, and the
        # generator does not wait for them to be ready.
        stack.start_nats()
        started = time.monotonic()
        stack.spawn_services()
        with services_collector():
            drive_result = asyncio.run(
                drive(
                    stack.nats_url, config, stack, limit_s=timeout, creations_per_s=creations_per_s
                )
            )
        startup = drive_result.ready - started
        done = time.monotonic()
        processes: dict[str, tuple[float, float]] = {}
        if stack.nats.process is not None:
            processes["nats-server"] = proc_stats(stack.nats.process.pid)
        for service in stack.services:
            assert service.process is not None
            processes[service.name] = proc_stats(service.process.pid)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        processes[GENERATOR] = (usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
        reads = asyncio.run(consumer_reads(stack))
        events = asyncio.run(read_events(stack.nats_url, auth=stack.admin_auth))
        bus_messages = asyncio.run(stream_messages(stack.nats_url, stack))
    finally:
        stop_started = time.monotonic()
        stack.stop()
        stopped_in = time.monotonic() - stop_started
        if owned_tmp is not None:
            owned_tmp.cleanup()
    wall = (done - started) + stopped_in  # reading the log is not part of the run
    if save_events is not None:  # one event per line, for replays (bench/preemption_replay.py)
        save_events.write_bytes(b"".join(encode_event(e) + b"\n" for e in events))
    created = created_records(config, drive_result.made)
    metrics = compute(config, drive_result, created, events)
    timeline = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        timeline = out_dir / f"{label or config.name}-timeline.csv"
        with timeline.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                [
                    "uid",
                    "name",
                    "cluster_queue",
                    "cohort",
                    "class",
                    "cpu",
                    "runtime_ms",
                    "created_s",
                    "first_admitted_s",
                    "last_admitted_s",
                    "admissions",
                    "last_started_s",
                    "finished_s",
                ]
            )
            writer.writerows(metrics["rows"])
    return RunResult(
        config=config,
        wall=wall,
        startup=startup,
        idle_startup_cpu=idle_startup_cpu() if measure_startup else None,
        drain_stop=stopped_in,
        window=metrics["window"],
        usage_pct=metrics["usage_pct"],
        goodput_pct=metrics["goodput_pct"],
        avg_wait=metrics["avg_wait"],
        max_wait=metrics["max_wait"],
        evictions=metrics["evictions"],
        peak_admissions_per_s=metrics["peak_admissions_per_s"],
        processes=processes,
        avg_first_wait=metrics["avg_first_wait"],
        bus_messages=bus_messages,
        violations=len(metrics["violations"]),
        peak_cohort_cpu=metrics["peak_cohort_cpu"],
        cohort_limit_cpu=metrics["cohort_limit_cpu"],
        workloads=len(created),
        finished=metrics["finished"],
        events=len(events),
        creation_span=(max(c.created for c in created) - min(c.created for c in created))
        if created
        else 0.0,
        timeline=timeline,
        ideal=ideal,
        by_type=metrics["by_type"],
        start_lag=metrics["start_lag"],
        overhold=metrics["overhold"],
        console_messages=drive_result.console_messages,
        creations_per_s=creations_per_s,
        published=published_by_subject(events),
        reads=reads,
        generator_cpu=(drive_result.cpu_creating, drive_result.cpu),
    )


# --- the table ----------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(result: RunResult) -> str:
    config = result.config
    spec = SPEC_IDEAL.get(config.name, {})
    goals = GOALS.get(config.name, {})
    mean, threshold = config.kueue_mean, config.kueue_threshold
    rows: list[tuple[str, str, str, str, str, str, str]] = []

    def row(
        name: str,
        berth: str,
        ideal: str = "-",
        spec_ideal: str = "-",
        kueue: str = "-",
        limit: str = "-",
        goal: str = "-",
    ) -> None:
        rows.append((name, berth, ideal, spec_ideal, kueue, limit, goal))

    # A scaled run is judged against goals scaled the same way, never the full-size ones:
    # the wall time follows the streams' length (count x interval), so its goal and Kueue's
    # figures scale with the run; the waits do not scale linearly and are not judged.
    full = CONFIGS.get(config.name)
    scale = config.total_workloads / full.total_workloads if full is not None else 1.0
    scaled = abs(scale - 1.0) > 1e-9

    def goal_of(key: str, value: float) -> str:
        if key not in goals:
            return "-"
        if result.creations_per_s is not None:
            return "not judged: compare with Kueue (same client limit)"
        if scaled and key != "wall":
            return "not judged (scaled run)"
        goal = goals[key] * (scale if key == "wall" else 1.0)
        ok = "ok" if value <= goal else "MISSED"
        return f"<= {goal:g}{f' (x{scale:.3g})' if scaled else ''} {ok}"

    kueue_wall = mean.get("wall")
    row(
        "wall time (s)",
        _fmt(result.wall),
        _fmt(result.ideal.wall),
        _fmt(spec.get("wall")),
        _fmt(kueue_wall)
        if not scaled or kueue_wall is None
        else f"{kueue_wall * scale:,.1f} (x{scale:.3g})",
        f"<= {threshold['wall'] * (scale if scaled else 1.0):,.0f}",
        goal_of("wall", result.wall),
    )
    row(
        "CQ usage, Kueue's checker (%)",
        _fmt(result.usage_pct),
        "-",
        "-",
        _fmt(mean.get("usage")),
        f">= {threshold['usage']:g}",
    )
    row("goodput: useful CPU-s / quota x window (%)", _fmt(result.goodput_pct))
    for klass in config.classes:
        name = klass.name
        value = result.avg_wait.get(name, float("nan"))
        row(
            f"avg time to admission, {name} (s)",
            f"{_fmt(value, 2)} (max {_fmt(result.max_wait.get(name), 1)})",
            f"{_fmt(result.ideal.avg_wait(name), 2)} (max {_fmt(result.ideal.max_wait(name), 1)})",
            _fmt(spec.get(name)),
            _fmt(mean.get(name), 1),
            f"<= {threshold[name]:g}",
            goal_of(name, value),
        )
    for klass in config.classes:
        first = result.avg_first_wait.get(klass.name, float("nan"))
        row(f"  the same to the first admission, {klass.name} (s)", _fmt(first, 2))
    for klass in config.classes:
        row(f"evictions, {klass.name}", str(result.evictions.get(klass.name, 0)), "0")
    row("admissions/s at peak (1 s bins)", str(result.peak_admissions_per_s))
    for name, (cpu, rss) in result.processes.items():
        row(f"{name}: CPU s / peak RSS MiB", f"{_fmt(cpu)} / {_fmt(rss, 0)}")
    if result.generator_cpu is not None:
        creating, driving = result.generator_cpu
        row(
            "  the generator's CPU s to its last create (from the services' spawn)",
            _fmt(creating, 2),
        )
        row("  the generator's CPU s to the last finish (the drive)", _fmt(driving, 2))
    workloads = max(1, result.workloads)
    services = sum(cpu for name, (cpu, _) in result.processes.items() if name in SERVICE_NAMES)
    row("service CPU per workload (ms; the four services)", _fmt(services / workloads * 1000, 3))
    if result.idle_startup_cpu is not None:
        row(
            "  less starting (an idle stack's, measured apart)",
            _fmt((services - result.idle_startup_cpu) / workloads * 1000, 3),
        )
    row(
        "  with nats-server",
        _fmt((services + result.processes.get("nats-server", (0.0, 0.0))[0]) / workloads * 1000, 3),
    )
    row(
        "bus messages per workload (JetStream, every stream)",
        _fmt(sum(result.bus_messages.values()) / workloads, 2),
    )
    for stream, count in sorted(result.bus_messages.items(), key=lambda item: -item[1]):
        row(f"  {stream}", f"{count:,} ({count / workloads:.2f} per workload)")
    row(
        "quota over-committed (event log)",
        "no" if result.violations == 0 else f"YES: {result.violations} instants",
        "no",
    )
    row(
        "peak cohort usage / cohort quota (CPU)",
        f"{_fmt(result.peak_cohort_cpu, 0)} / {_fmt(result.cohort_limit_cpu, 0)}",
    )
    row("workloads created / finished", f"{result.workloads:,} / {result.finished:,}")
    row("creation span, first to last create (s)", _fmt(result.creation_span))
    row("startup / stop (s)", f"{_fmt(result.startup, 2)} / {_fmt(result.drain_stop, 2)}")
    if result.idle_startup_cpu is not None:
        row(
            "starting, four services' CPU s (an idle stack to ready)",
            _fmt(result.idle_startup_cpu, 2),
        )
    row(
        "admitted -> started, mean / p99 (ms)",
        _mean_p99_text(result.start_lag),
        "0",
    )
    row(
        "quota held beyond run time, mean / p99 (ms)",
        _mean_p99_text(result.overhold),
        "0",
    )
    row("events in the log", f"{result.events:,}")
    if result.console_messages is not None:
        row("console: overview stream messages read", f"{result.console_messages:,}")
    for kind, count in result.by_type.items():
        row(f"  {kind}", f"{count:,}")
    headers = (
        "metric",
        "Berth",
        "ideal (sim)",
        "ideal (spec)",
        "Kueue mean",
        "Kueue threshold",
        "goal",
    )
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        f"Kueue scheduler benchmark, config {config.name}: {config.total_workloads:,} workloads,"
        f" {config.cohorts * config.cqs_per_cohort:,} ClusterQueues in {config.cohorts} cohorts,"
        f" preemption reclaimWithinCohort {config.reclaim_within_cohort} / withinClusterQueue"
        f" {config.within_cluster_queue}"
        + (", StrictFIFO" if config.strict_fifo else "")
        + (", borrowingYieldsToHigherPriority" if config.borrowing_yields else "")
        + (
            ", waitTargets "
            + " ".join(
                f"{'other' if floor is None else floor}={wait}"
                for floor, wait in config.wait_targets
            )
            if config.wait_targets
            else ""
        )
        + (f"; x{scale:.3g} of the full scenario" if scaled else "")
        + (
            f"; creations capped at {result.creations_per_s:g}/s (a client limit, as Kueue's)"
            if result.creations_per_s is not None
            else ""
        ),
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if result.timeline is not None:
        lines.append(f"timeline: {result.timeline}")
    return "\n".join(lines)


def render_subjects(result: RunResult) -> str:
    """Per subject family: events published per workload and by whom, and per service the
    messages its consumers decoded per workload, with those sent to it only to be dropped
    (``+0.50 dropped``: delivered, framed and called back for, never decoded)."""
    workloads = max(1, result.workloads)
    services = [name for name in SERVICE_NAMES if name in result.reads]
    families = list(result.published)
    families += sorted({s for r in result.reads.values() for s in r} - set(families))
    headers = ("subject", "published/wl", "by", *(f"{name} reads/wl" for name in services))
    rows: list[tuple[str, ...]] = []

    def cell(delivered: int, decoded: int) -> str:
        if delivered == 0:
            return "-"
        text = f"{decoded / workloads:.2f}"
        if delivered > decoded:
            text += f" +{(delivered - decoded) / workloads:.2f} dropped"
        return text

    for family in families:
        published = result.published.get(family, Published())
        rows.append(
            (
                family,
                f"{published.count / workloads:.2f}",
                ",".join(sorted(published.sources)) or "-",
                *(cell(*result.reads[name].get(family, (0, 0))) for name in services),
            )
        )
    totals = [
        (
            sum(d for d, _ in result.reads[name].values()),
            sum(c for _, c in result.reads[name].values()),
        )
        for name in services
    ]
    total_published = sum(p.count for p in result.published.values())
    rows.append(("all", f"{total_published / workloads:.2f}", "", *(cell(*t) for t in totals)))
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "Event stream by subject: published per workload (the event log) and read per workload"
        " by each service's consumers once they caught up (decoded; '+x dropped': sent to it,"
        " dropped undecoded)",
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="baseline")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of each stream's workloads"
    )
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--no-preemption",
        action="store_true",
        help="both ClusterQueue preemption policies Never (not Kueue's scenario: the spec's"
        " ideal schedule assumes no preemption)",
    )
    parser.add_argument(
        "--borrowing-yields",
        action="store_true",
        help="Berth's opt-in borrowingYieldsToHigherPriority (not Kueue's behaviour)",
    )
    parser.add_argument(
        "--strict-fifo", action="store_true", help="ClusterQueues with queueingStrategy StrictFIFO"
    )
    parser.add_argument(
        "--wait-targets",
        type=parse_wait_targets,
        default=(),
        metavar="PRIORITY=WAIT,...,WAIT",
        help="Berth's opt-in deadline order (Configuration.spec.admission.waitTargets)",
    )
    parser.add_argument(
        "--console",
        action="store_true",
        help="start the web console too, with one client on the overview's live stream",
    )
    parser.add_argument(
        "--creations-per-s",
        type=float,
        default=None,
        metavar="N",
        help="cap the generator's creations at N per second across all streams, as Kueue's"
        " client does in its published runs (50)",
    )
    parser.add_argument(
        "--save-events", type=Path, default=None, metavar="FILE", help="the event log, one per line"
    )
    args = parser.parse_args(argv)
    if args.creations_per_s is not None and args.creations_per_s <= 0:
        parser.error(f"--creations-per-s must be above 0, not {args.creations_per_s:g}")
    config = CONFIGS[args.config]
    label = config.name
    if args.scale != 1.0:
        config = config.scaled(args.scale)
        label = f"{config.name}-x{args.scale:g}"
    if args.no_preemption:
        config = config.without_preemption()
        label = f"{label}-no-preemption"
    if args.borrowing_yields:
        config = replace(config, borrowing_yields=True)
        label = f"{label}-borrowing-yields"
    if args.strict_fifo:
        config = replace(config, strict_fifo=True)
        label = f"{label}-strict-fifo"
    if args.wait_targets:
        config = replace(config, wait_targets=args.wait_targets)
        label = f"{label}-wait-targets"
    if args.console:
        label = f"{label}-console"
    if args.creations_per_s is not None:
        label = f"{label}-{args.creations_per_s:g}-per-s"
    result = run_benchmark(
        config,
        data_dir=args.data_dir,
        out_dir=args.out,
        timeout=args.timeout,
        label=label,
        with_console=args.console,
        creations_per_s=args.creations_per_s,
        save_events=args.save_events,
    )
    print(render(result))
    print()
    print(render_subjects(result))
    print(LOAD_CAVEAT.format(load=" / ".join(f"{v:.2f}" for v in os.getloadavg())))
    return 0 if result.violations == 0 and result.finished == result.workloads else 1


if __name__ == "__main__":
    raise SystemExit(main())
