"""Inputs that cannot wedge a service, end to end on `berth up`: poison in every place a
service reads (an object in berth-objects, events in the stream, entries in berth-config),
then a good Job is still admitted and run, every service is still up, and the poison is in
BERTH_DLQ and the metrics."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec

from shared.bus import CONFIG_BUCKET, OBJECTS_BUCKET, Bus
from shared.deadletter import DEAD_LETTER_STREAM
from shared.events import PodSet, WorkloadRef, WorkloadSubmitted, encode_event, now
from tests.conftest import FIXTURES, Stack, berth, bus_auth
from tests.e2e import (
    condition,
    eventually,
    get_json,
    job_manifest,
    pid_alive,
    scrape,
    submit_manifest,
)

NEGATIVE = WorkloadSubmitted(
    source="hand-made",  # no leased role: the fence lets it through to admission's rule
    workload=WorkloadRef("default", "negative", "u-negative"),
    kind="Job",
    queue_name="user-queue",
    pod_sets=[PodSet("main", 1, {"cpu": -9000})],  # would hand out 9 CPUs on admission
    created=now(),
)


async def _poison(url: str) -> None:
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    try:
        objects = await bus.kv(OBJECTS_BUCKET)
        # Once: KeyError 'metadata', and the watcher crash-looped on it forever.
        await objects.put("default.nometa", b'{"apiVersion": "batch/v1", "kind": "Job", "spec": {}}')
        config = await bus.kv(CONFIG_BUCKET)
        await config.put("clusterqueue._.broken", b"{not json")
        negative_cq = {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "negative"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": -4}]}]}]},
        }
        await config.put("clusterqueue._.negative", msgspec.json.encode(negative_cq))
        # On the batch subject: the services read the watcher's facts in batches, never
        # their per-workload copies (docs/events.md "Batches").
        await bus.js.publish("berth.b.wl.submitted", b"\x00not an event")
        await bus.js.publish("berth.b.wl.submitted", b"[" + encode_event(NEGATIVE) + b"]")
    finally:
        await bus.close()


async def _dead_letters(url: str) -> list[dict[str, Any]]:
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    try:
        info = await bus.js.stream_info(DEAD_LETTER_STREAM)
        letters = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await bus.js.get_msg(DEAD_LETTER_STREAM, seq)
            letters.append({"subject": msg.subject, **json.loads(msg.data or b"{}")})
        return letters
    finally:
        await bus.close()


def test_poison_everywhere_then_a_good_job_is_admitted(stack: Stack, tmp_path: Path) -> None:
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed002-single-clusterqueue-setup.yaml"), url=url)
    asyncio.run(_poison(url))
    submit_manifest(url, tmp_path, job_manifest("good", cpu=1, command=["sh", "-c", "echo ok"]))

    def finished() -> bool:
        [good] = [w for w in get_json(url, "workloads") if w["metadata"]["name"] == "good"]
        done = condition(good, "Finished")
        return bool(done and done["status"] == "True")

    eventually(finished, timeout=40)
    names = {w["metadata"]["name"] for w in get_json(url, "workloads")}
    assert "negative" not in names  # refused: never folded, never admitted

    def letters() -> list[dict[str, Any]]:
        stored = asyncio.run(_dead_letters(url))
        subjects = {(s["subject"], s["source"]) for s in stored}
        assert ("berth.dlq.watcher.object", "berth-objects/default.nometa") in subjects
        assert ("berth.dlq.admission.event", "berth.b.wl.submitted") in subjects
        assert ("berth.dlq.admission.config", "berth-config/clusterqueue._.broken") in subjects
        assert ("berth.dlq.admission.config", "berth-config/clusterqueue._.negative") in subjects
        return stored

    stored = eventually(letters, timeout=20)
    nometa = next(s for s in stored if s["source"] == "berth-objects/default.nometa")
    assert nometa["reason"] == "`metadata` must be a mapping, got None"
    assert nometa["raw"] == '{"apiVersion": "batch/v1", "kind": "Job", "spec": {}}'

    admission = scrape(stack, "admission")
    assert 'berth_admission_refused_facts_total{reason="negative_quantity"} 1.0' in admission
    assert 'berth_dead_lettered_total{kind="event",service="admission"}' in admission
    assert 'berth_dead_lettered_total{kind="object",service="watcher"}' in scrape(stack, "watcher")
    for name, pid in stack.pids.items():
        assert pid_alive(pid), f"{name} died"
