"""No poison pill in the Kubernetes backend: a watch line that is not JSON, an object without
metadata, name or uid, a Kueue object Berth refuses are dead-lettered and skipped; the
list-watch goes on and the next good workload is reported. kmock as the API server."""

from __future__ import annotations

from typing import Any

import kmock
import kmock as km
import pytest

from services.watcher.kube.api import KubeClient
from shared.events import WorkloadSubmitted
from tests.test_deadletter import dead_letters_in
from tests.test_kube_backend import JOBS_KEY, Harness, harness, labelled_job, start, stop
from tests.test_kube_watching import a_job, client, take

__all__ = ["client", "harness"]  # fixtures, imported for pytest


@pytest.mark.parametrize(
    ("poison", "source", "reason", "why"),
    [
        (b"not json\n", "kubernetes jobs.batch/v1 watch", "not JSON", "a torn line"),
        ({"type": "ADDED", "object": "a string"}, "kubernetes jobs.batch/v1 watch", "not a watch event", "an object that is no mapping"),
        ({"type": "ADDED", "object": {"kind": "Job", "metadata": [1]}}, "kubernetes jobs.batch/v1", "`metadata` is not a mapping", "metadata as a list"),
        ({"type": "MODIFIED", "object": {"kind": "Job", "metadata": {"uid": "u"}}}, "kubernetes jobs.batch/v1 -/-", "`metadata.name` is missing", "no name"),
    ],
)
async def test_a_malformed_watch_event_is_skipped(
    kmock: kmock.KubernetesEmulator, client: KubeClient, poison: Any, source: str, reason: str, why: str
) -> None:
    calls: list[int] = []
    reported: list[tuple[str, str, bytes]] = []

    def once(_: km.Request) -> Any:
        calls.append(1)
        return poison if len(calls) == 1 else None  # then kmock's own watch

    async def malformed(where: str, problem: str, raw: bytes) -> None:
        reported.append((where, problem, raw))

    kmock[km.params(watch="true")] << once
    kmock.objects[JOBS_KEY, "ns", "a"] = a_job("a")
    items = await take(client, 2, malformed=malformed)
    assert [i.object["metadata"]["name"] for i in items[1:]] == ["a"], why  # type: ignore[union-attr]
    assert [(where, problem) for where, problem, _ in reported] == [(source, reason)], why


async def test_the_backend_dead_letters_malformed_objects_and_reports_the_good_one(
    harness: Harness,
) -> None:
    no_uid = labelled_job()
    del no_uid["metadata"]["uid"]
    no_uid["metadata"]["name"] = "no-uid"
    bad_time = labelled_job()
    bad_time["metadata"].update(name="bad-time", uid="u-bt", creationTimestamp="yesterday")
    harness.kmock.objects[JOBS_KEY, "ns", "no-uid"] = no_uid
    harness.kmock.objects[JOBS_KEY, "ns", "bad-time"] = bad_time
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = labelled_job()
    lq = km.resource("kueue.x-k8s.io/v1beta1/localqueues")
    harness.kmock.objects[lq, "team-a", "bad"] = {
        "metadata": {"name": "bad", "namespace": "team-a"},
        "spec": {"clusterQueue": "../cq"},
    }
    task = await start(harness)
    await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted) and e.workload.name == "j1")
    stored = await dead_letters_in(harness.bus, at_least=3)
    reasons = {(s["subject"], s["reason"]) for s in stored}
    assert ("berth.dlq.watcher.object", "metadata.uid None is not a valid uid: must be a string") in reasons
    assert ("berth.dlq.watcher.object", "metadata.creationTimestamp 'yesterday' is not an RFC 3339 time") in reasons
    assert any(s == "berth.dlq.watcher.config" and 'spec.clusterQueue "../cq"' in r for s, r in reasons)
    assert not harness.runtime.stopping.is_set()
    await stop(harness, task)
