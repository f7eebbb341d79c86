"""Kueue's and SkyPilot's own example files, unchanged (tests/fixtures/upstream/README.md):
each is accepted as `berth apply` / `berth submit` / `berth jobs launch` read it, with the pod
sets or resources Kueue and SkyPilot give it, or refused in one line saying why; none ends
in a traceback. A sample runs on `berth up`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_cli.client import CliError
from berth_cli.config_fields import unsupported_object
from berth_cli.tasks import TaskError, load_managed_job
from berth_cli.writing import check_pod_groups, parse_config, prepare_workload
from shared.config import is_config_kind, load_documents
from shared.events import WorkloadAdmitted
from shared.workloads import workload_spec
from tests.conftest import FIXTURES, Stack, berth
from tests.e2e import event_log, eventually

UPSTREAM = FIXTURES / "upstream"
KUEUE = UPSTREAM / "kueue"
SKYPILOT = UPSTREAM / "skypilot"

_DRA = "dynamic resource allocation (DRA) is not supported"
_KUBECTL = "not a workload nor Kueue configuration"
_NOT_QUEUED = "not a kind Berth queues"
_UNKNOWN = "unknown kind 'Cluster'"  # kind's cluster configuration, not a Kubernetes object

# Refused Kueue files: the reason (the first refused document's) in the one-line error.
KUEUE_REFUSED = {
    "dra/sample-dra-capacity-job.yaml": _DRA,
    "dra/sample-dra-counter-job.yaml": _DRA,
    "dra/sample-dra-rct-job.yaml": _DRA,
    "jobs/ray-job-autoscaling-code-sample.yaml": _KUBECTL,  # a ConfigMap of code
    "jobs/ray-job-code-sample.yaml": _KUBECTL,
    "jobs/ray-service-sample.yaml": "a RayService serves without end",
    "jobs/sample-cronjob.yaml": "Berth queues Jobs, not the schedule that makes them",
    "jobs/sample-sparkapplication.yaml": _NOT_QUEUED,
    "multikueue/dev/manager-kind-config.yaml": _UNKNOWN,
    # The brief of issue 18: a ProvisioningRequest check is refused at apply, naming why.
    "provisioning/provisioning-setup.yaml": "need a cluster autoscaler and are not supported",
    "multikueue/dev/worker-kind-config.yaml": _UNKNOWN,
    "pod-based-workloads/sample-sandbox.yaml": _NOT_QUEUED,
    "pod-based-workloads/tekton-hello-task.yaml": _NOT_QUEUED,
    "pod-based-workloads/tekton-pipeline-run.yaml": _NOT_QUEUED,
    "pod-based-workloads/tekton-pipeline.yaml": _NOT_QUEUED,
    "pod-based-workloads/tekton-sleep-task.yaml": _NOT_QUEUED,
    "pod-based-workloads/workflow-queue-per-template.yaml": _NOT_QUEUED,
    "pod-based-workloads/workflow-single-queue.yaml": _NOT_QUEUED,
    "sample-enforce-requests-policy-binding.yaml": _KUBECTL,
    "sample-enforce-requests-policy.yaml": _KUBECTL,
    "sample-validating-policy-binding.yaml": _KUBECTL,
    "sample-validating-policy.yaml": _KUBECTL,
    "tas/kind-cluster.yaml": _UNKNOWN,
    "visibility/cluster-role-and-binding.yaml": _KUBECTL,
    "visibility/grafana-cluster-queue-reader.yaml": _KUBECTL,
    "visibility/grafana-local-queue-reader.yaml": _KUBECTL,
}
# Accepted Kueue files' workloads: (kind, [(pod set, count)]) per workload document, as
# Kueue's integrations compute them; configuration files accept with none.
KUEUE_WORKLOADS: dict[str, list[tuple[str, list[tuple[str, int]]]]] = {
    "admin/shared-quota-sample-job.yaml": [("Job", [("main", 1)])],
    "admission-fs/lq-a-simple-job.yaml": [("Job", [("main", 1)])],
    "admission-fs/lq-b-simple-job.yaml": [("Job", [("main", 1)])],
    "appwrapper/deployment-sample.yaml": [("AppWrapper", [("sample-appwrapper-deployment-0", 3)])],
    "appwrapper/leaderworkerset-sample.yaml": [
        ("AppWrapper", [("sample-appwrapper-lws-0", 2), ("sample-appwrapper-lws-1", 3)])
    ],
    "appwrapper/pytorch-sample.yaml": [
        (
            "AppWrapper",
            [("sample-appwrapper-pytorch-job-0", 1), ("sample-appwrapper-pytorch-job-1", 1)],
        )
    ],
    "dra/sample-dra-extended-resource-job.yaml": [("Job", [("main", 1)])],
    "getting-started/quick-start-job.yaml": [("Job", [("main", 3)])],
    "jobs/ray-cluster-sample.yaml": [("RayCluster", [("head", 1), ("small-group", 1)])],
    "jobs/ray-job-autoscaling-sample.yaml": [("RayJob", [("head", 1), ("small-group", 1)])],
    "jobs/ray-job-sample.yaml": [("RayJob", [("head", 1), ("small-group", 1)])],
    "jobs/sample-jaxjob.yaml": [("JAXJob", [("worker", 2)])],
    "jobs/sample-job-partial-admission.yaml": [("Job", [("main", 20)])],
    "jobs/sample-job.yaml": [("Job", [("main", 3)])],
    "jobs/sample-jobset-tas-combined.yaml": [("JobSet", [("workers", 8)])],
    "jobs/sample-jobset-tas-required.yaml": [("JobSet", [("workers", 4)])],
    "jobs/sample-jobset-tas-sliced.yaml": [("JobSet", [("workers", 8)])],
    "jobs/sample-jobset.yaml": [("JobSet", [("workers", 1), ("driver", 1)])],
    "jobs/sample-mpijob.yaml": [("MPIJob", [("launcher", 1), ("worker", 2)])],
    "jobs/sample-paddlejob.yaml": [("PaddleJob", [("worker", 2)])],
    "jobs/sample-pytorchjob.yaml": [("PyTorchJob", [("master", 1), ("worker", 1)])],
    "jobs/sample-scalable-job.yaml": [("Job", [("main", 3)])],
    "jobs/sample-tfjob.yaml": [("TFJob", [("ps", 1), ("worker", 2)])],
    "jobs/sample-xgboostjob.yaml": [("XGBoostJob", [("master", 1), ("worker", 2)])],
    "multikueue/dev/sample-tas-job.yaml": [("Job", [("main", 2)]), ("Job", [("main", 3)])],
    "pods-kueue/kueue-pod-group.yaml": [("Pod", [("main", 1)]), ("Pod", [("main", 1)])],
    "pods-kueue/kueue-pod.yaml": [("Pod", [("main", 1)])],
    "provisioning/sample-job.yaml": [("Job", [("main", 3)])],
    "serving-workloads/sample-deployment.yaml": [("Deployment", [("main", 3)])],
    "serving-workloads/sample-hami.yaml": [("Deployment", [("main", 1)])],
    "serving-workloads/sample-leaderworkerset-tas.yaml": [
        ("LeaderWorkerSet", [("leader", 2), ("worker", 4)])
    ],
    "serving-workloads/sample-leaderworkerset.yaml": [
        ("LeaderWorkerSet", [("leader", 2), ("worker", 4)])
    ],
    "serving-workloads/sample-statefulset.yaml": [("StatefulSet", [("main", 3)])],
    "tas/sample-job-preferred.yaml": [("Job", [("main", 40)])],
    "tas/sample-job-required.yaml": [("Job", [("main", 10)])],
    "tas/sample-job-unconstrained.yaml": [("Job", [("main", 6)])],
}

_CLOUD = "Berth runs tasks on Kubernetes"
_TPU_VM = "is a Cloud TPU VM, which runs on GCP, not Kubernetes"
# SkyPilot files: accepted with each task's resources (the candidate chosen when the queue is
# not known), or refused with the reason.
SKYPILOT_ACCEPTED: dict[str, list[str]] = {
    "examples/airflow/train.yaml": ["1x[CPU:1]"],
    "examples/amd/amd_pytorch_mnist.yaml": ["1x[CPU:128, MI300:2]"],
    "examples/amd_task.yaml": ["1x[MI210:1]"],
    "examples/chain_dag/2_jobs.yaml": ["1x[CPU:2]", "1x[CPU:4]"],
    "examples/distributed-pytorch/train.yaml": ["2x[CPU:4, L4:1]"],
    "examples/distributed_ray_train/ray_train.yaml": ["2x[L4:2]"],
    "examples/docker_app.yaml": ["1x[V100:4]"],
    "examples/managed_job.yaml": ["1x[-]"],
    "llm/deepseek-r1/deepseek-r1-671B-A100.yaml": ["2x[A100-80GB:8]"],
    "llm/fairseq2/multinode.yaml": ["2x[H100:8]"],
    "llm/falcon/train.yaml": ["1x[A100-80GB:1]"],
    "llm/gemma/serve.yaml": ["1x[L4:1]"],
    "llm/gpt-2/gpt2-pipeline.yaml": ["1x[CPU:64]", "1x[A100:1]"],
    "llm/kimi-k2/kimi-k2.yaml": ["2x[CPU:100, H100:8]"],
    "llm/llama-3/llama3.yaml": ["1x[CPU:32, L4:8]"],
    "llm/llama-3_1-finetuning/lora.yaml": ["1x[A100:8]"],
    "llm/llama-4-finetuning/llama-4-maverick_gke_llama_factory_lora.yaml": ["2x[CPU:100, H100:8]"],
}
SKYPILOT_REFUSED = {
    "examples/admin_policy/task.yaml": _CLOUD,
    "examples/aws-neuron/inferentia.yaml": "Inferentia (AWS Neuron) is not a device",
    "examples/batch/simple/pool.yaml": "SkyPilot worker pools (sky jobs pool) are not supported",
    "examples/custom_image.yaml": _CLOUD,
    "examples/disk_size.yaml": _CLOUD,
    "examples/elastic_training/job.yaml": "SkyPilot job groups (tasks run side by side)",
    "examples/minimal.yaml": _CLOUD,
    "examples/tpu/tpuvm_mnist.yaml": _TPU_VM,
    "examples/tpu/v6e/train-llama3-8b.yaml": _TPU_VM,
    "llm/axolotl/axolotl-spot.yaml": "malformed YAML at line 34",
}


def _files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.yaml"))


def test_every_upstream_file_is_classified() -> None:
    """Each copied file is in exactly one table here, so a new one says what it is."""
    kueue = set(KUEUE_REFUSED) | set(KUEUE_WORKLOADS)
    assert not set(KUEUE_REFUSED) & set(KUEUE_WORKLOADS)
    assert set(_files(KUEUE)) >= kueue
    skypilot = set(SKYPILOT_ACCEPTED) | set(SKYPILOT_REFUSED)
    assert set(_files(SKYPILOT)) == skypilot


def _read_kueue_file(path: str) -> list[tuple[str, list[tuple[str, int]]]]:
    """The file as `berth apply` (its configuration) and `berth submit` (its workloads)
    take it; CliError (one line) for the first document either refuses."""
    where = path
    documents = load_documents((KUEUE / path).read_text(), source=path)
    prepared = []
    for index, document in enumerate(documents):
        if is_config_kind(str(document.get("kind"))) or unsupported_object(document):
            parse_config([document], where)  # `berth apply` (skipping what it has no model for)
        else:
            at = f"{where}: document {index + 1}"
            prepared.append((prepare_workload(document, namespace=None, where=at), at))
    check_pod_groups(prepared)
    shown = []
    for obj, _ in prepared:
        spec = workload_spec(obj)
        shown.append((spec.kind, [(s.name, s.count) for s in spec.pod_sets]))
    return shown


@pytest.mark.parametrize("path", _files(KUEUE))
def test_kueue_examples(path: str) -> None:
    """A Kueue example is accepted with Kueue's pod sets, or refused saying why (its
    reason in KUEUE_REFUSED); never a traceback."""
    if path in KUEUE_REFUSED:
        with pytest.raises(CliError) as caught:
            _read_kueue_file(path)
        assert KUEUE_REFUSED[path] in str(caught.value) and "\n" not in str(caught.value)
        return
    assert _read_kueue_file(path) == KUEUE_WORKLOADS.get(path, []), path


def _machine(
    text: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[str, str], dict[str, str]]:
    """The launching user's machine: a home and project holding the task's local files, and
    a value for each variable and secret it leaves to the command line."""
    home, project = root / "home", root / "project"
    project.mkdir(parents=True)
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    env: dict[str, str] = {}
    secrets: dict[str, str] = {}
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]
    except yaml.YAMLError:
        return project, env, secrets
    for doc in documents:
        env.update({k: "given" for k, v in (doc.get("envs") or {}).items() if v is None})
        if isinstance(doc.get("secrets"), dict):
            secrets.update({k: "given" for k, v in doc["secrets"].items() if v is None})
        if isinstance(doc.get("workdir"), str):
            (project / os.path.expanduser(doc["workdir"])).mkdir(parents=True, exist_ok=True)
        for source in (doc.get("file_mounts") or {}).values():
            if isinstance(source, str) and "://" not in source:
                local = project / os.path.expanduser(source)
                if not local.exists():
                    local.parent.mkdir(parents=True, exist_ok=True)
                    local.write_text("x")
    return project, env, secrets


@pytest.mark.parametrize("path", _files(SKYPILOT))
def test_skypilot_examples(path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SkyPilot task is accepted with SkyPilot's resources per task, or refused saying why
    (SKYPILOT_REFUSED); never a traceback. The variables it leaves empty are given, as a
    user gives them with --env and --secret, and its local files exist."""
    text = (SKYPILOT / path).read_text()
    base, env, secrets = _machine(text, tmp_path, monkeypatch)
    if path in SKYPILOT_REFUSED:
        with pytest.raises(TaskError) as caught:
            load_managed_job(text, source=path, env=env, secrets=secrets, base_dir=base)
        assert SKYPILOT_REFUSED[path] in str(caught.value) and "\n" not in str(caught.value)
        return
    spec = load_managed_job(text, source=path, env=env, secrets=secrets, base_dir=base)
    assert [task.resources for task in spec.tasks] == SKYPILOT_ACCEPTED[path]
    assert "given" not in json.dumps([task.job for task in spec.tasks if secrets])


# Kueue files run on `berth up`, one after the other on Kueue's own single ClusterQueue.
SAMPLE = [
    ("jobs/sample-jobset.yaml", "sleep-job-"),
    ("jobs/sample-pytorchjob.yaml", "pytorch-simple"),
    ("jobs/sample-mpijob.yaml", "pi"),
    ("pods-kueue/kueue-pod-group.yaml", "sample-group"),
    ("serving-workloads/sample-statefulset.yaml", "nginx-statefulset"),
]
DEFAULT_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: default, name: default}
spec: {clusterQueue: cluster-queue}
"""


def test_a_sample_is_admitted_end_to_end(stack: Stack, tmp_path: Path) -> None:
    """On Kueue's single-clusterqueue setup, a JobSet, a PyTorchJob, an MPIJob, a pod group
    and a StatefulSet from Kueue's site are each admitted (then deleted); SkyPilot's
    two-task chain runs to SUCCEEDED."""
    url = stack.url
    berth("apply", "-f", str(KUEUE / "admin/single-clusterqueue-setup.yaml"), url=url)
    (tmp_path / "default-queue.yaml").write_text(DEFAULT_QUEUE)
    berth("apply", "-f", str(tmp_path / "default-queue.yaml"), url=url)
    for path, prefix in SAMPLE:
        berth("submit", "-f", str(KUEUE / path), url=url)

        def admitted(prefix: str = prefix) -> str:
            names = [e.workload.name for e in event_log(url) if isinstance(e, WorkloadAdmitted)]
            return next((name for name in names if name.startswith(prefix)), "")

        name = eventually(admitted, timeout=30)
        berth("delete", "workload", name, url=url)
    chain = berth("jobs", "launch", str(SKYPILOT / "examples/chain_dag/2_jobs.yaml"), url=url)
    job_id = chain.stdout.split()[3]

    def succeeded() -> bool:
        jobs = json.loads(berth("jobs", "queue", "-o", "json", url=url).stdout)
        job: dict[str, Any] = next(j for j in jobs if str(j["id"]) == job_id)
        return bool(job["status"] == "SUCCEEDED")

    eventually(succeeded, timeout=60)
    output = berth("jobs", "logs", job_id, url=url).stdout
    assert output.index("run for task 1") < output.index("run for task 2")
