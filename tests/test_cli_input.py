"""Bad input to the CLI: one clear line naming the problem, non-zero exit, nothing applied."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import nats.errors
import pytest

from berth_cli.get import due
from shared.bus import CONFIG_BUCKET, Bus, KeyNotFound
from tests.conftest import FIXTURES, berth, bus_auth

GOOD_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: good-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default-flavor, resources: [{name: cpu, nominalQuota: 4}]}]
"""


def _keys(url: str, bucket: str) -> list[str]:
    async def read() -> list[str]:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            kv = await bus.kv(bucket)
            try:
                return sorted(await kv.keys())
            except KeyNotFound:  # no key at all
                return []
        finally:
            await bus.close()

    return asyncio.run(read())


def _with_stream(url: str) -> None:
    """The event stream, as the first service to start creates it."""

    async def create() -> None:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            await bus.ensure_stream()
        finally:
            await bus.close()

    asyncio.run(create())


def _submitted(url: str) -> list[str]:
    """The workloads `berth submit` sent to the watcher (stored SubmitWorkload commands)."""

    async def read() -> list[str]:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            subscription = await bus.replay_subscription(["berth.cmd.submit.>"])
            try:
                messages = await subscription.fetch(100, timeout=0.5)
            except (nats.errors.TimeoutError, TimeoutError):  # nothing stored at all
                return []
            return sorted(m.subject.removeprefix("berth.cmd.submit.") for m in messages)
        finally:
            await bus.close()

    return asyncio.run(read())


@pytest.mark.parametrize(
    ("second_document", "message"),
    [
        (
            "kind: ClusterQueue\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: bad}\nspec:\n"
            "  resourceGroups: [{coveredResources: [cpu], flavors: [{name: f, resources: [{name: cpu, nominalQuota: 12x}]}]}]\n",
            "document 2: ClusterQueue bad: `spec.resourceGroups[0].flavors[0].resources[0].nominalQuota`: invalid quantity '12x'",
        ),
        ("kind: Gizmo\napiVersion: v1\nmetadata: {name: g}\n", "document 2: unknown kind 'Gizmo'"),
        (
            "kind: LocalQueue\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {name: lq}\nspec: {clusterQueu: x}\n",
            "unknown field `clusterQueu`",
        ),
        ("key: [unclosed\n", "malformed YAML at line"),
    ],
)
def test_apply_refuses_whole_file(
    nats_url: str, tmp_path: Path, second_document: str, message: str
) -> None:
    """A bad second document means the good first one is not applied either."""
    path = tmp_path / "config.yaml"
    path.write_text(GOOD_QUEUE + "---\n" + second_document)
    result = berth("apply", "-f", str(path), url=nats_url, check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
    assert _keys(nats_url, CONFIG_BUCKET) == []


def _job(queue: str | None, *, priority_class: str | None = None, cpu: str = "1") -> str:
    labels = {}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"generateName": "job-", "labels": labels},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "command": ["true"],
                                "resources": {"requests": {"cpu": cpu}},
                            }
                        ]
                    }
                }
            },
        }
    )


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            _job("missing-queue"),
            "label kueue.x-k8s.io/queue-name: LocalQueue 'missing-queue' not found in namespace 'default'",
        ),
        (_job(None), "no queue: set label kueue.x-k8s.io/queue-name"),
        (_job("user-queue", priority_class="urgent"), "WorkloadPriorityClass 'urgent' not found"),
        (
            _job("user-queue", cpu="two"),
            "`spec.template.spec.containers[0].resources.requests.cpu`: invalid quantity 'two'",
        ),
        (
            json.dumps({"apiVersion": "example.com/v1", "kind": "FooJob", "metadata": {"name": "d"}}),
            "unknown kind 'FooJob'",
        ),
    ],
)
def test_submit_refuses_with_the_field_named(
    nats_url: str, tmp_path: Path, job: str, message: str
) -> None:
    """A Job naming a missing queue or class, or with a bad request, is refused; none is created."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=nats_url)
    _with_stream(nats_url)
    path = tmp_path / "jobs.yaml"
    path.write_text(_job("user-queue") + "\n---\n" + job)
    result = berth("submit", "-f", str(path), url=nats_url, check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert _submitted(nats_url) == []


def test_submit_honours_generate_name_and_namespace(nats_url: str, tmp_path: Path) -> None:
    """generateName gets a random suffix; -n sets the namespace; the same name twice is refused."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=nats_url)
    _with_stream(nats_url)
    path = tmp_path / "job.yaml"
    path.write_text(_job("user-queue"))
    first = berth("submit", "-f", str(path), "-n", "default", url=nats_url).stdout.strip()
    second = berth("submit", "-f", str(path), url=nats_url).stdout.strip()
    assert first.startswith("job.batch/job-") and first.endswith(" created") and first != second
    named = tmp_path / "named.yaml"
    named.write_text(_job("user-queue").replace('"generateName": "job-"', '"name": "fixed"'))
    berth("submit", "-f", str(named), url=nats_url)
    again = berth("submit", "-f", str(named), url=nats_url, check=False)
    assert again.returncode != 0 and "'fixed' already exists" in again.stderr
    other = berth("submit", "-f", str(named), "-n", "team-x", url=nats_url, check=False)
    assert "LocalQueue 'user-queue' not found in namespace 'team-x'" in other.stderr
    assert len(_submitted(nats_url)) == 3
    assert "default.fixed" in _submitted(nats_url)
    gone = berth("delete", "workload", "fixed", url=nats_url)
    assert gone.stdout.strip() == 'workload "fixed" deleted'
    missing = berth("delete", "workload", "fixed", url=nats_url, check=False)
    assert 'workload "fixed" not found in namespace "default"' in missing.stderr
    berth("submit", "-f", str(named), url=nats_url)  # the name is free again


def test_submit_says_when_no_service_has_started(nats_url: str, tmp_path: Path) -> None:
    """Without the event stream nothing would carry a workload out: say so, send nothing."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=nats_url)
    path = tmp_path / "job.yaml"
    path.write_text(_job("user-queue"))
    result = berth("submit", "-f", str(path), url=nats_url, check=False)
    assert result.returncode != 0
    assert "event stream does not exist" in result.stderr


def test_commands_say_when_berth_is_not_running(tmp_path: Path) -> None:
    """With nothing listening, a command fails fast and says how to point it at Berth."""
    path = tmp_path / "q.yaml"
    path.write_text(GOOD_QUEUE)
    result = berth("apply", "-f", str(path), url="nats://127.0.0.1:1", check=False)
    assert result.returncode != 0
    assert "cannot reach NATS at nats://127.0.0.1:1" in result.stderr
    assert "berth up" in result.stderr


def test_schema_is_json_schema(tmp_path: Path) -> None:
    """`berth schema` prints a JSON Schema naming every event type."""
    schema = json.loads(berth("schema", url="nats://127.0.0.1:1").stdout)
    assert "WorkloadAdmitted" in schema["$defs"]


def test_deadlines_read_as_in_now_or_late() -> None:
    now = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
    assert due("2026-11-24T12:00:20Z", now=now) == "in 20s"
    assert due("2026-11-24T12:00:00Z", now=now) == "now"
    assert due("2026-11-24T11:55:00Z", now=now) == "5m late"
    assert due(None, now=now) == ""
