"""No poison pill (shared/deadletter.py): a malformed event, object, status or config entry is
skipped with one log line, counted, and kept in BERTH_DLQ; the consumer or watch loop goes on
with the next good input. Real nats-server; the local backend and the config mirror run
in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from services.watcher.local.backend import LocalBackend
from shared.bus import CONFIG_BUCKET, JOBS_BUCKET, OBJECTS_BUCKET, STATUS_BUCKET, Bus
from shared.config_mirror import ConfigMirror
from shared.deadletter import (
    DEAD_LETTER_STREAM,
    MAX_RAW_BYTES,
    dead_letter_subject,
    dead_letters,
    ensure_dead_letter_stream,
    letter,
)
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
    encode_event,
    subject_for,
)
from shared.jobs import NEXT_ID_KEY, ManagedJob, encode_job, job_key, load_jobs
from shared.service import Runtime

# --- the letter itself -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "encoding", "truncated", "why"),
    [
        (b'{"kind": "Job"}', "text", False, "UTF-8 bytes are kept as text, readable as they came"),
        (b"\xff\xfe\x00garbage", "base64", False, "anything else as base64"),
        (b"x" * (MAX_RAW_BYTES + 10), "text", True, "at most 64 KiB of a huge input, marked"),
    ],
)
def test_a_letter_keeps_the_raw_bytes(raw: bytes, encoding: str, truncated: bool, why: str) -> None:
    body = letter("watcher", "object", "berth-objects/default.x", "no metadata", raw)
    assert (body.encoding, body.truncated, body.size) == (encoding, truncated, len(raw)), why
    assert dead_letter_subject("watcher", "object") == "berth.dlq.watcher.object"


# --- helpers -----------------------------------------------------------------------------------


async def dead_letters_in(bus: Bus, *, at_least: int = 1) -> list[dict[str, Any]]:
    """Every message in BERTH_DLQ (subject and decoded body), once there are ``at_least``."""
    async with asyncio.timeout(5):
        while True:
            try:
                info = await bus.js.stream_info(DEAD_LETTER_STREAM)
            except Exception:  # not created yet
                info = None
            if info is not None and info.state.messages >= at_least:
                break
            await asyncio.sleep(0.05)
    letters = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await bus.js.get_msg(DEAD_LETTER_STREAM, seq)
        letters.append({"subject": msg.subject, **json.loads(msg.data or b"{}")})
    return letters


def dead_lettered(service: str, kind: str) -> float:
    labels = {"service": service, "kind": kind}
    return REGISTRY.get_sample_value("berth_dead_lettered_total", labels) or 0.0


class Events:
    """The event stream as it fills: wait for an event that matches."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.seen: list[AnyEvent] = []
        self.subscription: Any = None

    async def wait_for(self, predicate: Callable[[AnyEvent], bool]) -> AnyEvent:
        if self.subscription is None:
            self.subscription = await self.bus.replay_subscription(["berth.>"])
        async with asyncio.timeout(10):
            while True:
                for event in self.seen:
                    if predicate(event):
                        return event
                self.seen += await self.bus.next_batch(self.subscription, wait=0.2) or []


def job(name: str, *, uid: str, namespace: str = "default", runtime: str | None = "100ms",
        command: list[str] | None = None) -> dict[str, Any]:
    annotations = {"berth.dev/simulated-runtime": runtime} if runtime else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": "2025-01-01T00:00:00+00:00",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": annotations,
        },
        "spec": {"template": {"spec": {"containers": [{"name": "c", "command": command or ["true"]}]}}},
    }


def admitted(name: str, uid: str, namespace: str = "default") -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id=f"admitted-{uid}-1",
        source="admission",
        workload=WorkloadRef(namespace, name, uid),
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[FlavorAssignment("main", 1, {}, {})],
        generation=1,
    )


@pytest.fixture
def bus(watcher_bus: Bus) -> Bus:
    return watcher_bus


# --- the dead-letter stream --------------------------------------------------------------------


async def test_the_stream_has_the_copies_the_bus_settings_name_not_the_environment(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dead-letter stream is made with the bus's injected settings (one copy, on this
    single server), even when the environment asks for 3 (which one server cannot hold:
    read from the environment, the stream was refused and the letter lost)."""
    monkeypatch.setenv("BERTH_STREAM_REPLICAS", "3")
    assert bus.settings.stream_replicas == 1
    await dead_letters(bus, "watcher").send("event", "berth.wl.x", "bad", b"{")
    info = await bus.js.stream_info(DEAD_LETTER_STREAM)
    assert info.config.num_replicas == 1
    assert [s["raw"] for s in await dead_letters_in(bus)] == ["{"]


async def test_the_stream_is_created_idempotently_and_a_letter_is_stored_once(bus: Bus) -> None:
    await ensure_dead_letter_stream(bus.js, bus.settings)
    # a second service (or restart) changes nothing
    await ensure_dead_letter_stream(bus.js, bus.settings)
    letters = dead_letters(bus, "watcher")
    for _ in range(2):  # met again (a replay after a restart): one letter
        await letters.send("event", "berth.wl.x", "bad", b"{", identity="BERTH:7")
    await letters.send("event", "berth.wl.x", "bad", b"{", identity="BERTH:8")  # another message
    stored = await dead_letters_in(bus, at_least=2)
    assert [(s["subject"], s["source"], s["reason"], s["raw"]) for s in stored] == [
        ("berth.dlq.watcher.event", "berth.wl.x", "bad", "{"),
        ("berth.dlq.watcher.event", "berth.wl.x", "bad", "{"),
    ]
    info = await bus.js.stream_info(DEAD_LETTER_STREAM)
    assert info.config.subjects == ["berth.dlq.>"]


async def test_a_malformed_event_is_dead_lettered_and_the_consumer_goes_on(bus: Bus) -> None:
    """A durable consumer gets the good events around a poison one; the poison is in the DLQ."""
    dead_letters(bus, "recovery")
    before = dead_lettered("recovery", "event")
    good = WorkloadFinished(source="w", workload=WorkloadRef("default", "a", "u1"), generation=1, succeeded=True)
    poison_subject = "berth.b.wl.finished"  # the services' facts come in batches
    await bus.js.publish(poison_subject, b'[{"type": "WorkloadFinished", "generation": "x"}]')
    await bus.js.publish(poison_subject, b"not json at all")
    await bus.publish(good)
    subscription = await bus.durable_subscription("poison-test", ["berth.wl.>"])
    handled: list[AnyEvent] = []
    stopping = asyncio.Event()

    async def handler(events: list[AnyEvent]) -> None:
        handled.extend(events)
        if any(e.id == good.id for e in events):
            stopping.set()

    async with asyncio.timeout(10):
        await bus.consume(subscription, handler, stopping=stopping)
    assert [e.id for e in handled] == [good.id]
    stored = await dead_letters_in(bus, at_least=2)
    # the letters are sent as each message fails, which a take may do in either order
    assert sorted((s["subject"], s["source"], s["reason"], s["raw"]) for s in stored) == [
        ("berth.dlq.recovery.event", poison_subject, "Expected `int`, got `str` - at `$[0].generation`",
         '[{"type": "WorkloadFinished", "generation": "x"}]'),
        ("berth.dlq.recovery.event", poison_subject, "JSON is malformed: invalid character (byte 4)",
         "not json at all"),
    ]
    assert dead_lettered("recovery", "event") == before + 2


# --- the local backend -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_backend(bus: Bus, tmp_path: Path) -> AsyncIterator[tuple[LocalBackend, Events]]:
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(tmp_path / "data"))
    local = LocalBackend(runtime, stop_grace=1)
    events = Events(bus)
    task = asyncio.create_task(local.run())
    try:
        yield local, events
    finally:
        runtime.stopping.set()
        bus.interrupt_waits()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)
        await runtime.cancel_tasks(grace=1)


@pytest.fixture
async def backend(bus: Bus, tmp_path: Path) -> AsyncIterator[tuple[LocalBackend, Events]]:
    async with running_backend(bus, tmp_path) as started:
        yield started


POISON_OBJECTS: list[tuple[str, bytes, str, str]] = [
    ("default.nometa", b'{"apiVersion": "batch/v1", "kind": "Job", "spec": {}}', "`metadata` must be a mapping", "a Job without metadata once crash-looped the watcher (KeyError)"),
    ("default.notjson", b"{{{", "not JSON", "not JSON"),
    ("default.list", b"[1, 2]", "an object must be a mapping", "JSON, but no object"),
    ("default._tmp_x", msgspec.json.encode(job("/tmp/x", uid="p1")), 'metadata.name "/tmp/x" is not a valid name', "a path as a name: its logs would leave the data dir"),
    ("default.elsewhere", msgspec.json.encode(job("real-name", uid="p2")), "stored under key 'default.elsewhere'", "under a key that is not its own"),
    ("default.zero", msgspec.json.encode({**job("zero", uid="p3"), "spec": {"parallelism": 0, "template": {"spec": {"containers": [{}]}}}}), "`spec.parallelism` is 0", "no pods to run"),
]


async def test_malformed_objects_are_dead_lettered_and_the_watcher_runs_the_next_job(
    bus: Bus, tmp_path: Path
) -> None:
    # The status bucket is read once, at start: the bad status is there before the watcher.
    status = await bus.kv(STATUS_BUCKET)
    await status.put("default.good", b'{"uid": "u-good", "pids": [0]}')  # pid 0: our own group
    async with running_backend(bus, tmp_path) as (local, events):
        await _poison_then_a_good_job(bus, local, events)


async def _poison_then_a_good_job(bus: Bus, local: LocalBackend, events: Events) -> None:
    kv = await bus.kv(OBJECTS_BUCKET)
    for key, value, _, _ in POISON_OBJECTS:
        await kv.put(key, value)
    await kv.put("default.good", msgspec.json.encode(job("good", uid="u-good")))
    # The poison put while the watch runs is skipped as well.
    await events.wait_for(lambda e: isinstance(e, WorkloadSubmitted) and e.workload.name == "good")
    await kv.put("default.late", b'{"metadata": 5}')
    await bus.publish(admitted("good", "u-good"))
    await events.wait_for(lambda e: isinstance(e, WorkloadStarted) and e.workload.name == "good")
    await events.wait_for(lambda e: isinstance(e, WorkloadFinished) and e.workload.name == "good")
    stored = await dead_letters_in(bus, at_least=len(POISON_OBJECTS) + 2)
    by_source = {s["source"]: s for s in stored}
    for key, value, reason, why in POISON_OBJECTS:
        letter_for = by_source[f"berth-objects/{key}"]
        assert reason in letter_for["reason"], why
        assert letter_for["subject"] == "berth.dlq.watcher.object"
        assert letter_for["raw"] == value.decode(), why
    assert "`pids` must be a list of process ids" in by_source["berth-status/default.good"]["reason"]
    assert "`metadata` must be a mapping" in by_source["berth-objects/default.late"]["reason"]
    assert not local.runtime.stopping.is_set()  # the watcher is still up


async def test_a_malformed_submit_command_is_dead_lettered(
    bus: Bus, backend: tuple[LocalBackend, Events]
) -> None:
    _, events = backend
    bad = SubmitWorkload(source="cli", workload=WorkloadRef("default", "bad", "u-bad"), object={"kind": "Job"})
    good_obj = job("fine", uid="u-fine")
    good = SubmitWorkload(source="cli", workload=WorkloadRef("default", "fine", "u-fine"), object=good_obj)
    await bus.publish_many([bad, good])
    await events.wait_for(lambda e: isinstance(e, WorkloadSubmitted) and e.workload.name == "fine")
    [stored] = await dead_letters_in(bus)
    assert stored["source"] == subject_for(bad)
    assert stored["subject"] == "berth.dlq.watcher.object"


async def test_logs_stay_in_the_data_dir_owner_only(
    bus: Bus, backend: tuple[LocalBackend, Events], tmp_path: Path
) -> None:
    _, events = backend
    kv = await bus.kv(OBJECTS_BUCKET)
    await kv.put("team-a.talker", msgspec.json.encode(job("talker", uid="u-t", namespace="team-a", runtime=None, command=["sh", "-c", "echo hello"])))
    await events.wait_for(lambda e: isinstance(e, WorkloadSubmitted) and e.workload.name == "talker")
    await bus.publish(admitted("talker", "u-t", namespace="team-a"))
    await events.wait_for(lambda e: isinstance(e, WorkloadFinished) and e.workload.name == "talker")
    logs = tmp_path / "data" / "logs"
    log_file = logs / "team-a" / "talker" / "1-main-0.log"
    assert log_file.read_text() == "hello\n"
    for folder in (logs, logs / "team-a", logs / "team-a" / "talker"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
    assert stat.S_IMODE(os.stat(log_file).st_mode) == 0o600


# --- the config mirror -------------------------------------------------------------------------

GOOD_CQ = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {"namespaceSelector": {}}}
POISON_CONFIG: list[tuple[str, bytes, str]] = [
    ("clusterqueue._.broken", b"{not json", "JSON is malformed"),
    ("clusterqueue._.neg", msgspec.json.encode({**GOOD_CQ, "metadata": {"name": "neg"}, "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": -4}]}]}]}}), "quantity -4 is negative"),
    ("clusterqueue._.other", msgspec.json.encode(GOOD_CQ), "stored under key 'clusterqueue._.other', not 'clusterqueue._.cq'"),
]


async def test_malformed_config_entries_are_dead_lettered_and_the_mirror_follows_on(bus: Bus, tmp_path: Path) -> None:
    kv = await bus.kv(CONFIG_BUCKET)
    for key, value, _ in POISON_CONFIG[:2]:
        await kv.put(key, value)
    await kv.put("clusterqueue._.cq", msgspec.json.encode(GOOD_CQ))
    runtime = Runtime(name="admission", bus=bus, data_dir=str(tmp_path))
    mirror = ConfigMirror()
    await mirror.start(runtime)
    assert list(mirror.objects) == ["clusterqueue._.cq"]
    # Live changes: poison, then a good object; the follow loop takes both in stride.
    await kv.put(*POISON_CONFIG[2][:2])
    await kv.put("localqueue.default.lq", msgspec.json.encode({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}))
    async with asyncio.timeout(5):
        while "localqueue.default.lq" not in mirror.objects:  # noqa: ASYNC110 - a poll is simplest
            await asyncio.sleep(0.05)
    assert sorted(mirror.objects) == ["clusterqueue._.cq", "localqueue.default.lq"]
    stored = await dead_letters_in(bus, at_least=3)
    by_source = {s["source"]: s for s in stored}
    for key, _, reason in POISON_CONFIG:
        assert reason in by_source[f"berth-config/{key}"]["reason"]
        assert by_source[f"berth-config/{key}"]["subject"] == "berth.dlq.admission.config"
    runtime.stopping.set()
    await runtime.cancel_tasks(grace=2)


async def test_a_poison_event_from_the_stream_reaches_no_handler(bus: Bus) -> None:
    """Replay (admission's way of reading the stream) skips and dead-letters it too."""
    dead_letters(bus, "admission")
    await bus.js.publish("berth.b.wl.submitted", b"[" + encode_event(admitted("x", "u"))[:-5])
    subscription = await bus.replay_subscription(["berth.wl.>"])
    folded: list[AnyEvent] = []
    assert await bus.replay_to_end(subscription, folded.extend) == 1
    assert folded == []
    [stored] = await dead_letters_in(bus)
    assert stored["subject"] == "berth.dlq.admission.event"


# --- the managed-job records -------------------------------------------------------------------


async def test_a_malformed_job_record_is_dead_lettered_and_the_others_load(bus: Bus) -> None:
    kv = await bus.kv(JOBS_BUCKET)
    good = ManagedJob(id=2, name="train", namespace="default", resources="1x[CPU:1]", submitted_at=0.0)
    await kv.put(job_key(1), b'{"id": "one"}')
    await kv.put(job_key(2), encode_job(good))
    await kv.put(NEXT_ID_KEY, b"3")
    letters = dead_letters(bus, "recovery")
    assert await load_jobs(kv, malformed=partial(letters.send, "object")) == [good]
    [stored] = await dead_letters_in(bus)
    assert (stored["subject"], stored["source"]) == ("berth.dlq.recovery.object", "berth-jobs/job.00000001")
    assert "Expected `int`, got `str` - at `$.id`" in stored["reason"]
