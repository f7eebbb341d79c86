"""Kueue's scheduler benchmark, its scenario and its generator: the scenario's objects
(ResourceFlavor, ClusterQueues in cohorts, Namespaces and LocalQueues, and Berth's opt-in
Configuration) and the drive, which writes them, then runs three creation streams per
ClusterQueue (sleep the interval, then create the Job in the objects bucket, as Kueue's
generator does) and waits for every workload to finish (bench/kueue_scheduler.py runs it).

A class's streams all sleep the same interval, so without a client limit they run as one
loop per class (:func:`drive`'s ``ticks``): each tick creates the class's next Job in every
ClusterQueue, sent together, their acks awaited in one round trip, and all stamped with the
tick's moment. The objects are those of a stream per queue; what goes is the generator's
own CPU per create (a timer, a task and a round trip each), which the stack under test
shares two cores with. With a client limit, each queue's stream waits for its own slot, as
Kueue's do.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import msgspec

from bench.kueue_config import ClassSpec, ScenarioConfig, workload_name
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
from shared.subjects import record_subject
from shared.workloads import workload_key

CLASS_LABEL = "berth.dev/bench-class"
RUNTIME_LABEL = "berth.dev/bench-runtime-ms"


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
            record_subject(FINISHED_FAMILY, batching=batched), cb=on_finished
        )

        t_config = time.time()
        await write_config(bus, config_documents(config))

        # Per create only what a client does (the request's bytes, the call); the records
        # are built after the run from what each create kept (created_records).
        made: list[tuple[str, int, str, str, str]] = []
        cpu_creating = 0.0  # the generator's CPU to its last create
        pacer = None if creations_per_s is None else Pacer(creations_per_s)

        async def stream(cq: str, set_index: int, pacer: Pacer) -> None:
            """One ClusterQueue's stream of one class, each create waiting for its slot
            under the client limit (the module docstring)."""
            nonlocal cpu_creating
            klass = config.classes[set_index]
            interval = klass.interval_ms / 1000.0
            jobs = _jobs(cq, klass)
            names = [workload_name(klass, set_index, seq) for seq in range(klass.count)]
            uids = uuid4_strings(klass.count)
            for name, uid in zip(names, uids, strict=True):
                await asyncio.sleep(interval)  # sleep the interval, then create (Kueue's loop)
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

        async def ticks(set_index: int) -> None:
            """Every ClusterQueue's stream of one class at once (the module docstring): each
            tick, the class's next Job in every queue, stamped with the tick's moment."""
            nonlocal cpu_creating
            klass = config.classes[set_index]
            interval = klass.interval_ms / 1000.0
            jobs = {cq: _jobs(cq, klass) for cq, _ in config.cluster_queues()}
            for seq in range(klass.count):
                await asyncio.sleep(interval)  # sleep the interval, then create (Kueue's loop)
                name = workload_name(klass, set_index, seq)
                stamp = creation_timestamp()
                creates = [
                    (cq, uid, workload_key(cq, name), job.encode(name, uid, stamp))
                    for (cq, job), uid in zip(jobs.items(), uuid4_strings(len(jobs)), strict=True)
                ]
                sending = await bus.send_key_updates(
                    objects_kv, [(key, data, 0) for _, _, key, data in creates]
                )
                outcomes = await sending.outcomes()
                unanswered = []
                for (cq, uid, key, data), outcome in zip(creates, outcomes, strict=True):
                    if isinstance(outcome, BusTimeout):
                        unanswered.append(create(objects_kv, key, data))  # read back, sent again
                    elif isinstance(outcome, Exception):
                        raise outcome  # a lost swap cannot be: the key is new
                    made.append((cq, set_index, name, uid, stamp))
                await asyncio.gather(*unanswered)  # together: no queue waits on another's
                if len(made) == total:
                    cpu_creating = time.process_time() - cpu_start

        streams = (
            [asyncio.create_task(ticks(index)) for index in range(len(config.classes))]
            if pacer is None
            else [
                asyncio.create_task(stream(cq, index, pacer))
                for cq, _ in config.cluster_queues()
                for index in range(len(config.classes))
            ]
        )
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


def _jobs(cq: str, klass: ClassSpec) -> SimulatedJobs:
    """The Jobs of one class's stream in one ClusterQueue (its namespace is the queue's)."""
    return SimulatedJobs(
        cq,
        klass.runtime_ms,
        cpu=str(klass.request_cpu),
        priority=klass.priority,
        labels={CLASS_LABEL: klass.name, RUNTIME_LABEL: str(klass.runtime_ms)},
    )


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
