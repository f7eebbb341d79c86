"""Managed namespaces on the Kubernetes backend: BERTH_MANAGED_NAMESPACES, and the exact
requests the watcher makes with it. kmock is the API server, with deploy/'s RBAC emulated:
a cluster-wide request for a namespaced resource is answered 403, as the per-namespace Role
would have it."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock as km
import msgspec
import pytest

from services.watcher.kube import acting, namespaces
from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.kube.mirroring import CONFIG_RESOURCES
from services.watcher.kube.namespaces import ManagedNamespaces, SettingError, ignored
from services.watcher.kube.settings import KubeSettings
from shared.events import CreateWorkload, SubmitWorkload, WorkloadRef, WorkloadSubmitted
from tests.conftest import captured_logs
from tests.test_deadletter import dead_letters_in
from tests.test_kube_backend import FAST, JOBS_KEY, Harness, harness, labelled_job

__all__ = ["harness"]  # a fixture, imported for pytest

MANAGED = ManagedNamespaces.parse("team-a,batch")
# What the per-namespace Role does not grant: every namespaced resource the watcher could ask
# for cluster-wide (Kueue's both versions, since the mirror falls back from v1beta2).
CLUSTER_WIDE = [
    "/apis/batch/v1/jobs",
    "/api/v1/pods",
    "/apis/ray.io/v1/rayjobs",
    "/apis/kueue.x-k8s.io/v1beta2/localqueues",
    "/apis/kueue.x-k8s.io/v1beta1/localqueues",
    "/apis/kueue.x-k8s.io/v1beta2/workloads",
    "/api/v1/events",
]
FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "code": 403, "reason": "Forbidden"}


PARSE_CASES = [
    ("", set(), "unset or empty: every namespace, as with a ClusterRole"),
    ("batch", {"batch"}, "deploy/base/config.yaml's value"),
    (
        " batch , team-a ,",
        {"batch", "team-a"},
        "blanks around names and a trailing comma are skipped",
    ),
    (",,", set(), "only separators: none listed, so every namespace"),
]


@pytest.mark.parametrize(("value", "names", "reason"), PARSE_CASES, ids=[c[2] for c in PARSE_CASES])
def test_managed_namespaces_parse(value: str, names: set[str], reason: str) -> None:
    assert ManagedNamespaces.parse(value).names == names, reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("Batch", "upper case is no namespace"),
        ("team_a", "nor is an underscore"),
        ("a b", "nor a space"),
    ],
)
def test_a_managed_namespace_that_is_no_namespace_is_refused_at_start(
    value: str, reason: str
) -> None:
    with pytest.raises(SettingError, match="BERTH_MANAGED_NAMESPACES"):
        ManagedNamespaces.parse(value)


REFUSAL_CASES = [
    (ManagedNamespaces(), "anything", None, "none listed: every namespace is managed"),
    (MANAGED, "batch", None, "a listed namespace"),
    (
        MANAGED,
        "default",
        "namespace 'default' is not managed (BERTH_MANAGED_NAMESPACES=batch,team-a)",
        "one not listed",
    ),
]


@pytest.mark.parametrize(
    ("managed", "namespace", "refusal", "reason"), REFUSAL_CASES, ids=[c[3] for c in REFUSAL_CASES]
)
def test_what_the_watcher_may_touch(
    managed: ManagedNamespaces, namespace: str, refusal: str | None, reason: str
) -> None:
    assert managed.refusal(namespace) == refusal, reason


def test_settings_are_read_from_one_environment_mapping() -> None:
    """run_kubernetes reads the environment once; the same mapping gives every setting."""
    settings = KubeSettings.from_environment(
        {
            "BERTH_MANAGED_NAMESPACES": "batch",
            "BERTH_KUBE_STATUS_QPS": "50",
            "BERTH_DEFAULT_IMAGE": "registry.example/task:1",
        }
    )
    assert settings.namespaces.names == {"batch"}
    assert (settings.status.qps, settings.status.burst) == (50.0, 30)
    assert settings.image == "registry.example/task:1"
    assert KubeSettings.from_environment({}).namespaces.everywhere


async def _start(
    harness: Harness, managed: ManagedNamespaces
) -> tuple[KubernetesBackend, asyncio.Task[None]]:
    for path in CLUSTER_WIDE:
        harness.kmock[path] << 403 << FORBIDDEN
    client = KubeClient.for_host(str(harness.kmock.url).rstrip("/"))
    config = {
        k: v for k, v in CONFIG_RESOURCES.items() if k != "Namespace"
    }  # see test_kube_backend
    backend = KubernetesBackend(
        harness.runtime, client=client, settings=FAST, config_resources=config, namespaces=managed
    )

    async def run() -> None:
        try:
            await backend.observe()
        finally:
            await client.close()

    task = asyncio.create_task(run())
    harness.task = task  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        await harness.runtime.ready.wait()
    return backend, task


def _gets(harness: Harness) -> set[tuple[str, bool]]:
    """(path, is a watch) of every GET the server received."""
    return {
        (r.url.path, r.url.query.get("watch") == "true") for r in harness.kmock if r.method == "GET"
    }


async def test_the_watcher_lists_and_watches_each_managed_namespace(harness: Harness) -> None:
    """With BERTH_MANAGED_NAMESPACES=team-a,batch the watcher becomes ready under the
    per-namespace RBAC: Jobs, Pods, RayJobs and LocalQueues are listed and watched at
    /namespaces/<ns>/ for each of the two, Kueue's cluster-scoped kinds cluster-wide, the
    Workload view is probed per namespace; nothing is asked cluster-wide for a namespaced
    resource, and a Job in another namespace is never seen."""
    job = labelled_job()
    job["metadata"]["namespace"] = "batch"
    harness.kmock.objects[JOBS_KEY, "batch", "j1"] = job
    elsewhere = labelled_job()
    elsewhere["metadata"].update(namespace="other", name="j2", uid="u2")
    harness.kmock.objects[JOBS_KEY, "other", "j2"] = elsewhere
    # Kueue's Workload CRD installed (kmock serves a resource once it holds an object).
    workloads = km.resource("kueue.x-k8s.io/v1beta2/workloads")
    harness.kmock.objects[workloads, "other", "w"] = {"metadata": {"name": "w"}}
    _, task = await _start(harness, MANAGED)
    submitted = await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    expected_collections = {
        (f"/{root}/namespaces/{ns}/{plural}", watch)
        for root, plural, watches in (
            ("apis/batch/v1", "jobs", (False, True)),
            ("api/v1", "pods", (False, True)),
            ("apis/ray.io/v1", "rayjobs", (False,)),  # kmock serves none: 404, listed again later
        )
        for ns in ("batch", "team-a")
        for watch in watches
    }
    expected_kueue = {
        f"/apis/kueue.x-k8s.io/{version}/namespaces/{ns}/{plural}"
        for ns in ("batch", "team-a")
        # kmock serves no LocalQueues: v1beta2 is absent (404), then v1beta1 is asked.
        for version, plural in (
            ("v1beta2", "localqueues"),
            ("v1beta1", "localqueues"),
            ("v1beta2", "workloads"),
        )
    } | {
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
        "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    }

    def all_asked() -> bool:
        gets = _gets(harness)
        return expected_collections <= gets and expected_kueue <= {path for path, _ in gets}

    # Until the watches (re)opened after their lists and the status probe ran (5 s at most);
    # what comes after that is held to the exact sets below.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not all_asked():
        if loop.time() > deadline:
            break
        await asyncio.sleep(0.05)
    # Room for a request that must not come (cluster-wide, another namespace) after them.
    await asyncio.sleep(0.5)
    harness.runtime.stopping.set()
    async with asyncio.timeout(5):
        await task
    assert submitted.workload == WorkloadRef("batch", "j1", "u1")
    assert not [e for e in harness.events if e.workload.namespace == "other"]
    gets = _gets(harness)
    assert not {path for path, _ in gets} & set(CLUSTER_WIDE), "a cluster-wide namespaced request"
    assert not [path for path, _ in gets if "/namespaces/other/" in path]
    collections = {
        (path, watch)
        for path, watch in gets
        if path.rsplit("/", 1)[-1] in ("jobs", "pods", "rayjobs")  # not a GET by name
    }
    assert collections == expected_collections
    kueue = {path for path, _ in gets if "/kueue.x-k8s.io/" in path}
    assert expected_kueue <= kueue


async def test_every_namespace_is_one_cluster_wide_list_watch_when_none_is_listed(
    harness: Harness,
) -> None:
    """Unset, the watcher lists and watches each resource once, cluster-wide (a ClusterRole
    grants it): the behaviour before the setting existed."""
    client = KubeClient.for_host(str(harness.kmock.url).rstrip("/"))
    config = {k: v for k, v in CONFIG_RESOURCES.items() if k != "Namespace"}
    backend = KubernetesBackend(
        harness.runtime, client=client, settings=FAST, config_resources=config
    )
    task = asyncio.create_task(backend.observe())
    async with asyncio.timeout(5):
        await harness.runtime.ready.wait()
    harness.runtime.stopping.set()
    async with asyncio.timeout(5):
        await task
    await client.close()
    paths = {path for path, _ in _gets(harness)}
    assert {"/apis/batch/v1/jobs", "/api/v1/pods", "/apis/ray.io/v1/rayjobs"} <= paths
    assert not [path for path in paths if "/namespaces/" in path]


def _job(namespace: str, name: str, uid: str) -> dict[str, Any]:
    job = labelled_job()
    job["metadata"].update(namespace=namespace, name=name, uid=uid)
    return job


async def test_a_create_in_an_unmanaged_namespace_is_refused_and_dead_lettered(
    harness: Harness,
) -> None:
    """A CreateWorkload for namespace `other` is not sent to the server (the Role is not
    there): one log line with the reason, and the command kept whole in BERTH_DLQ; a
    SubmitWorkload for `batch` is created at /apis/batch/v1/namespaces/batch/jobs."""
    harness.kmock.objects[JOBS_KEY, "team-a", "x"] = _job("team-a", "x", "ux")  # Jobs served
    _, task = await _start(harness, MANAGED)
    refused = CreateWorkload(
        source="recovery",
        workload=WorkloadRef("other", "j2", "u2"),
        object=_job("other", "j2", "u2"),
    )
    with captured_logs(acting) as logs:
        await harness.bus.publish(refused)
        await harness.bus.publish(
            SubmitWorkload(
                source="cli",
                workload=WorkloadRef("batch", "j1", "u1"),
                object=_job("batch", "j1", "u1"),
            )
        )
        await harness.wait_for(
            lambda e: isinstance(e, WorkloadSubmitted) and e.workload.name == "j1"
        )
        letters = await dead_letters_in(harness.bus)
    harness.runtime.stopping.set()
    async with asyncio.timeout(5):
        await task
    reason = "namespace 'other' is not managed (BERTH_MANAGED_NAMESPACES=batch,team-a)"
    assert [line for line in logs if line["event"] == "create_refused"] == [
        {
            "component": "watcher.kube",
            "event": "create_refused",
            "log_level": "error",
            "workload": "other/j2",
            "by": "recovery",
            "reason": reason,
            "dead_letter": "berth.dlq.watcher.event",
        }
    ]
    assert not [line for line in logs if line["event"].startswith("malformed_")]
    [letter] = letters
    assert (letter["subject"], letter["source"], letter["reason"]) == (
        "berth.dlq.watcher.event",
        "berth.cmd.create.other.j2",
        reason,
    )
    assert msgspec.json.decode(letter["raw"])["id"] == refused.id
    posts = [r.url.path for r in harness.kmock if r.method == "POST"]
    assert posts == ["/apis/batch/v1/namespaces/batch/jobs"]


def test_a_workload_seen_outside_the_managed_namespaces_is_ignored_with_one_line() -> None:
    """A scoped list-watch never yields one, but a server that ignored the scope might: the
    object is not tracked, and said once however often it is seen."""
    seen: set[str] = set()
    outside = _job("other", "j2", "u2")
    with captured_logs(namespaces) as logs:
        assert ignored(outside, MANAGED, seen) and ignored(outside, MANAGED, seen)
        assert not ignored(_job("batch", "j1", "u1"), MANAGED, seen)
        assert not ignored(outside, ManagedNamespaces(), seen)
    assert logs == [
        {
            "component": "watcher.kube",
            "event": "workload_ignored",
            "log_level": "info",
            "workload": "other/j2",
            "reason": "namespace 'other' is not managed (BERTH_MANAGED_NAMESPACES=batch,team-a)",
        }
    ]
