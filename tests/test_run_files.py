"""What a task's processes get before they start (services/watcher/local/run_files.py) and what a
cluster gets for its secrets (services/watcher/kube/task_secrets.py): a real nats-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kmock
import pytest

from services.watcher.kube.api import KubeClient
from services.watcher.kube.task_secrets import prepare_cluster
from services.watcher.local.run_files import RunSetupError, _inside, prepare_run
from shared.bus import Bus
from shared.secrets import SECRETS_BUCKET
from tests.conftest import bus_auth

REF = {
    "name": "HF_TOKEN",
    "valueFrom": {"secretKeyRef": {"name": "berth-secret-1", "key": "HF_TOKEN"}},
}


def _job(env: list[dict[str, Any]], **annotations: str) -> dict[str, Any]:
    pod = {"containers": [{"name": "task", "command": ["true"], "env": env}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "annotations": annotations},
        "spec": {"template": {"spec": pod}},
    }


@pytest.mark.parametrize(
    ("target", "inside"),
    [
        ("~/data/config.json", "data/config.json"),  # home: under the run directory
        ("/data/x", "data/x"),  # absolute: under it too
        ("relative_dir", "relative_dir"),  # SkyPilot: relative to the workdir
        ("./dotslash", "dotslash"),
    ],
)
def test_mount_targets_land_inside_the_run_directory(target: str, inside: str) -> None:
    """Every file mount target is placed under the run directory (see each case)."""
    assert str(_inside(target)) == inside


@pytest.mark.parametrize("target", ["../escape", "/a/../../b", "~", ""])
def test_a_target_that_would_leave_it_is_refused(target: str) -> None:
    """A target that is nothing or climbs out of the run directory is refused."""
    with pytest.raises(ValueError, match="is not a path Berth can place"):
        _inside(target)


async def test_secrets_and_files_are_ready_before_the_processes(
    nats_url: str, tmp_path: Path
) -> None:
    """The secret's value is in the environment, the workdir's files and the mount in the
    run directory, which is the working directory; a missing secret fails the run naming it,
    never a value."""
    workdir = tmp_path / "src"
    workdir.mkdir()
    (workdir / "train.py").write_text("print(1)")
    (tmp_path / "cfg.json").write_text("{}")
    obj = _job(
        [REF],
        **{
            "berth.dev/workdir": str(workdir),
            "berth.dev/file-mounts": json.dumps({"~/data/cfg.json": str(tmp_path / "cfg.json")}),
        },
    )
    pod_specs = {"main": obj["spec"]["template"]["spec"]}
    pods = [("main-0", ["true"], {"HF_TOKEN": ""}, None)]
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        with pytest.raises(RunSetupError) as caught:
            await prepare_run(bus, obj, pod_specs, pods, run_dir=tmp_path / "run")
        assert str(caught.value) == "secret berth-secret-1 has no key HF_TOKEN (for HF_TOKEN)"
        kv = await bus.kv(SECRETS_BUCKET)
        await kv.put("berth-secret-1", json.dumps({"HF_TOKEN": "sekret"}).encode())
        [(_, _, env, cwd)] = await prepare_run(bus, obj, pod_specs, pods, run_dir=tmp_path / "run")
    finally:
        await bus.close()
    assert env["HF_TOKEN"] == "sekret"
    assert cwd == str(tmp_path / "run")
    assert (tmp_path / "run" / "train.py").read_text() == "print(1)"
    assert (tmp_path / "run" / "data" / "cfg.json").exists()
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700


async def test_a_cluster_gets_the_secret_before_the_job(
    nats_url: str, kmock: kmock.KubernetesEmulator
) -> None:
    """The Kubernetes backend makes the Secret a Job refers to from the bucket, once."""
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        kv = await bus.kv(SECRETS_BUCKET)
        await kv.put("berth-secret-1", json.dumps({"HF_TOKEN": "sekret"}).encode())
        async with KubeClient.for_host(str(kmock.url).rstrip("/")) as client:
            await prepare_cluster(client, bus, "ns", _job([REF]))
            await prepare_cluster(client, bus, "ns", _job([REF]))  # a second attempt
    finally:
        await bus.close()
    posts = [r for r in kmock if r.method == "POST"]
    assert [r.url.path for r in posts] == ["/api/v1/namespaces/ns/secrets"] * 2
    assert posts[0].data["stringData"] == {"HF_TOKEN": "sekret"}
    assert posts[0].data["metadata"]["name"] == "berth-secret-1"
