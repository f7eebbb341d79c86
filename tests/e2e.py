"""Helpers for end-to-end tests: polling the CLI's JSON output and reading the event log."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from bench.eventlog import read_events, usage_changes
from shared.bus import Bus
from shared.events import AnyEvent
from tests.conftest import Stack, berth, bus_auth


def get_json(url: str, *args: str) -> list[dict[str, Any]]:
    result = berth("get", *args, "-o", "json", url=url)
    return list(json.loads(result.stdout)["items"])


def eventually(check: Callable[[], Any], *, timeout: float = 20, interval: float = 0.2) -> Any:
    """Call ``check`` until it returns something truthy without raising; return that."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except AssertionError as error:
            last = error
        time.sleep(interval)
    raise AssertionError(f"not true within {timeout}s: {last}")


def condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in workload["status"]["conditions"]:
        if item["type"] == kind:
            return dict(item)
    return None


def is_admitted(workload: dict[str, Any]) -> bool:
    admitted = condition(workload, "Admitted")
    finished = condition(workload, "Finished")
    return bool(admitted and admitted["status"] == "True" and not finished)


def event_log(url: str) -> list[AnyEvent]:
    """Every event in the stream, in order."""
    return asyncio.run(read_events(url, auth=bus_auth(url)))


def first_at(events: list[AnyEvent], kind: type, name: str) -> int:
    """Where in ``events`` the first ``kind`` about workload ``name`` is; StopIteration if
    there is none."""
    return next(i for i, e in enumerate(events) if isinstance(e, kind) and e.workload.name == name)


def peak_usage(
    events: list[AnyEvent], *, groups: dict[str, str] | None = None
) -> dict[tuple[str, str, str], int]:
    """The highest usage per (ClusterQueue, flavor, resource) at any instant of the log.

    With ``groups`` (ClusterQueue -> cohort), usage is summed per cohort instead, to check a
    cohort's total. A re-admission while still holding quota is a failure by itself.
    """
    usage: dict[tuple[str, str, str], int] = {}
    peak: dict[tuple[str, str, str], int] = {}
    for change in usage_changes(events):
        assert not change.while_holding, f"admitted twice without release: {change}"
        owner = (groups or {}).get(change.cluster_queue, change.cluster_queue)
        for (flavor, resource), amount in change.usage.items():
            key = (owner, flavor, resource)
            usage[key] = usage.get(key, 0) + change.sign * amount
            peak[key] = max(peak.get(key, 0), usage[key])
    return peak


def objects_status(url: str, namespace: str, name: str) -> dict[str, Any]:
    """The local backend's status of a workload object (phase, generation, pids)."""
    import msgspec

    from shared.bus import STATUS_BUCKET
    from shared.workloads import workload_key

    async def read() -> dict[str, Any]:
        bus = await Bus.connect(url, source="test", auth=bus_auth(url))
        try:
            kv = await bus.kv(STATUS_BUCKET)
            entry = await kv.get(workload_key(namespace, name))
            assert entry.value is not None
            return dict(msgspec.json.decode(entry.value))
        finally:
            await bus.close()

    return asyncio.run(read())


def pid_alive(pid: int) -> bool:
    import os
    from pathlib import Path

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()


def job_manifest(
    name: str,
    *,
    cpu: str | int,
    priority_class: str | None = None,
    queue: str = "user-queue",
    namespace: str | None = None,
    command: list[str] | None = None,
    gpu: int = 0,
    simulated_runtime: str | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job for the tests: one container, requests, Kueue's labels."""
    requests: dict[str, str] = {"cpu": str(cpu)}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if namespace:
        metadata["namespace"] = namespace
    if simulated_runtime:
        metadata["annotations"] = {"berth.dev/simulated-runtime": simulated_runtime}
    container: dict[str, Any] = {"name": "main", "resources": {"requests": requests}}
    if simulated_runtime is None:
        container["command"] = command or ["sleep", "600"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def submit_manifest(url: str, folder: Any, manifest: dict[str, Any]) -> None:
    """Write the manifest to a file and `berth submit` it, as a user would."""
    import json

    path = folder / f"{manifest['metadata']['name']}.json"
    path.write_text(json.dumps(manifest))
    berth("submit", "-f", str(path), url=url)


def service_ports(stack: Stack) -> dict[str, str]:
    """Each service's HTTP port, from the table `berth up` printed."""
    table = "".join(stack.output)
    return dict(re.findall(r"^(\w+)\s+\d+\s+http://127\.0\.0\.1:(\d+)", table, re.M))


def scrape(stack: Stack, service: str) -> str:
    """The Prometheus text a service serves on /metrics."""
    port = service_ports(stack)[service]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())
