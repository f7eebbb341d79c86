"""SkyPilot tasks as SkyPilot reads them: accelerator sets and lists, any_of / ordered chosen
by what the ClusterQueue can satisfy, AMD and TPU devices, envs and secrets from the command
line, pipelines, recover_on_exit_codes (berth_cli/tasks/)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from berth_cli.tasks import Flavor, TaskError, load_managed_job
from berth_cli.tasks.fields import Fail
from berth_cli.tasks.resources import accelerator_resource

GPU = "nvidia.com/gpu"


def _requests(spec: Any, index: int = 0) -> dict[str, str]:
    container = spec.tasks[index].job["spec"]["template"]["spec"]["containers"][0]
    return dict(container["resources"]["requests"])


def _env(spec: Any) -> list[dict[str, Any]]:
    return list(spec.job["spec"]["template"]["spec"]["containers"][0]["env"])


DEVICES = [
    ("an NVIDIA model", "A100", GPU),
    ("SkyPilot's mixed case", "A10g", GPU),
    ("an AMD Instinct", "MI300X", "amd.com/gpu"),
    ("an older AMD Instinct", "MI210", "amd.com/gpu"),
    ("a GKE TPU slice, counted in chips", "tpu-v5-lite-podslice", "google.com/tpu"),
    ("a GKE TPU v6e slice", "tpu-v6e-slice", "google.com/tpu"),
]


@pytest.mark.parametrize(("reason", "model", "resource"), DEVICES, ids=[d[0] for d in DEVICES])
def test_each_accelerator_requests_its_own_resource(reason: str, model: str, resource: str) -> None:
    """Never an AMD or TPU device counted as NVIDIA (see the id)."""
    assert accelerator_resource(model) == resource, reason
    spec = load_managed_job(f"resources: {{accelerators: '{model}:4'}}\nrun: x", source="t.yaml")
    assert _requests(spec)[resource] == "4"
    assert set(_requests(spec)) == {resource}


@pytest.mark.parametrize(
    ("model", "why"),
    [("tpu-v2-8", "Cloud TPU VM"), ("Trainium", "AWS Neuron"), ("Gaudi2", "Intel Gaudi")],
)
def test_devices_berth_cannot_request_are_refused(model: str, why: str) -> None:
    """A TPU VM, AWS Neuron or Intel Gaudi is refused naming the reason."""
    with pytest.raises(Fail, match=why):
        accelerator_resource(model)


def _flavor(name: str, gpus: int, **labels: str) -> Flavor:
    return Flavor(name=name, node_labels=labels, quotas={"cpu": 64_000, GPU: gpus * 1000})


L4_AND_A100 = [
    _flavor("l4", 8, **{"cloud.google.com/gke-accelerator": "nvidia-l4"}),
    _flavor("a100", 8, **{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
]
CHOICES: list[tuple[str, str, dict[str, list[Flavor]] | None, str]] = [
    (
        "a set: the first the queue satisfies (no H100 flavor)",
        "{H100: 8, A100: 8}",
        {"": L4_AND_A100},
        "A100",
    ),
    ("a list: in order, the first that fits", "[L4:8, A100:8]", {"": L4_AND_A100}, "L4"),
    (
        "too many GPUs of the first model for its flavor",
        "[L4:16, A100:8]",
        {"": L4_AND_A100},
        "A100",
    ),
    (
        "flavors that name no model: by quota alone",
        "[A100:16, L4:4]",
        {"": [_flavor("gpus", 8)]},
        "L4",
    ),
    (
        "none fits: the first (it waits or fails its prechecks)",
        "[L4:64, A100:64]",
        {"": L4_AND_A100},
        "L4",
    ),
    ("the queue not known: the first", "{A10g: 8, L4: 8}", None, "A10g"),
]


@pytest.mark.parametrize(
    ("reason", "accelerators", "flavors", "model"), CHOICES, ids=[c[0] for c in CHOICES]
)
def test_accelerator_candidates_are_chosen_by_the_cluster_queue(
    reason: str, accelerators: str, flavors: Any, model: str
) -> None:
    """Of several accelerators, the first the ClusterQueue's flavors satisfy (see the id)."""
    text = f"resources: {{accelerators: '{accelerators}'}}\nrun: x"
    spec = load_managed_job(text, source="t.yaml", flavors=flavors)
    assert spec.job["metadata"]["labels"]["berth.dev/accelerator"] == model, reason
    assert spec.resources.startswith(f"1x[{model}:")


def test_any_of_takes_the_first_kubernetes_candidate_not_only_the_first() -> None:
    """any_of: a candidate on another cloud is skipped for one Kubernetes can run."""
    text = """
resources:
  cpus: 2
  any_of:
    - {cloud: aws, accelerators: A100:8}
    - {infra: k8s, accelerators: L4:1}
    - {accelerators: A100:1}
run: x
"""
    spec = load_managed_job(text, source="t.yaml")
    assert spec.job["metadata"]["labels"]["berth.dev/accelerator"] == "L4"
    assert _requests(spec) == {"cpu": "2", GPU: "1"}


def test_ordered_asks_the_queue_too() -> None:
    """ordered: in order, the first the ClusterQueue can satisfy (here the second)."""
    text = (
        "resources:\n  ordered:\n    - {accelerators: H100:8}\n    - {accelerators: L4:8}\nrun: x"
    )
    spec = load_managed_job(text, source="t.yaml", flavors={"": L4_AND_A100})
    assert spec.resources == "1x[L4:8]"


def test_env_file_then_env_flags_override_the_task() -> None:
    """envs < --env-file < --env (SkyPilot's order); a null env must be given."""
    text = "envs: {MODEL: small, TOKEN: null, KEEP: kept}\nrun: x"
    with pytest.raises(
        TaskError, match=r"`envs.TOKEN`: has no value: give it with --env TOKEN=VALUE"
    ):
        load_managed_job(text, source="t.yaml")
    spec = load_managed_job(text, source="t.yaml", env={"MODEL": "large", "TOKEN": "t"})
    values = {e["name"]: e.get("value") for e in _env(spec)}
    assert values["MODEL"] == "large" and values["TOKEN"] == "t" and values["KEEP"] == "kept"


def test_secrets_are_references_never_values() -> None:
    """A secret's value is returned for the secret store and appears nowhere in the Job:
    the container refers to the launch's secret by name, as Kubernetes does."""
    text = "secrets: {HF_TOKEN: null, WANDB_API_KEY: from-file}\nenvs: {HF_TOKEN: plain}\nrun: x"
    spec = load_managed_job(
        text, source="t.yaml", secrets={"HF_TOKEN": "hf-sekret"}, secret_name="berth-secret-abc"
    )
    assert spec.secrets == {"HF_TOKEN": "hf-sekret", "WANDB_API_KEY": "from-file"}
    dumped = json.dumps([task.job for task in spec.tasks])
    assert "hf-sekret" not in dumped and "from-file" not in dumped
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in _env(spec) if "valueFrom" in e}
    assert refs == {
        "HF_TOKEN": {"name": "berth-secret-abc", "key": "HF_TOKEN"},
        "WANDB_API_KEY": {"name": "berth-secret-abc", "key": "WANDB_API_KEY"},
    }
    assert not [e for e in _env(spec) if e["name"] == "HF_TOKEN" and "value" in e]


def test_a_pipeline_is_one_job_of_tasks_in_order() -> None:
    """A first document of only `name` names the pipeline; each task keeps its own
    resources and recovery; --env reaches every task."""
    text = """
name: train-eval
---
name: train
resources: {cpus: 2, job_recovery: {max_restarts_on_errors: 2, recover_on_exit_codes: [33]}}
run: echo train
---
name: eval
resources: {accelerators: L4:1}
run: echo eval
"""
    spec = load_managed_job(text, source="p.yaml", env={"RUN": "1"})
    assert spec.name == "train-eval"
    assert [(t.name, t.resources) for t in spec.tasks] == [
        ("train", "1x[CPU:2]"),
        ("eval", "1x[L4:1]"),
    ]
    assert spec.tasks[0].max_restarts_on_errors == 2 and spec.tasks[0].recover_on_exit_codes == (
        33,
    )
    annotations = spec.tasks[0].job["metadata"]["annotations"]
    assert annotations["berth.dev/recover-on-exit-codes"] == "33"
    for task in spec.tasks:
        env = task.job["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "RUN", "value": "1"} in env


def test_a_pipeline_without_a_header_is_named_by_its_first_task() -> None:
    """Without a name-only first document every document is a task."""
    spec = load_managed_job("name: a\nrun: x\n---\nrun: y", source="p.yaml")
    assert spec.name == "a" and [t.name for t in spec.tasks] == ["a", "task-1"]


def test_recover_on_exit_codes_single_code() -> None:
    """recover_on_exit_codes may be one code."""
    text = "resources: {job_recovery: {recover_on_exit_codes: 29}}\nrun: x"
    assert load_managed_job(text, source="t.yaml").tasks[0].recover_on_exit_codes == (29,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "execution: parallel\n---\nrun: a\n---\nrun: b",
            "t.yaml: `execution`: SkyPilot job groups (tasks run side by side) are not supported",
        ),
        ("name: p\n---\nrun: a\n---\nrun: [b]", "t.yaml: `task 1: run`: must be a string"),
        (
            "resources: {accelerators: tpu-v3-8}",
            "t.yaml: `resources.accelerators`: tpu-v3-8 is a Cloud TPU VM, which runs on GCP",
        ),
        (
            "resources: {accelerators: Inferentia:1}",
            "t.yaml: `resources.accelerators`: Inferentia (AWS Neuron) is not a device Berth can request",
        ),
        (
            "resources: {any_of: [{cloud: aws}, {infra: gcp}]}",
            "t.yaml: `resources.cloud`: Berth runs tasks on Kubernetes, got 'aws'",
        ),
        (
            "secrets: {HF_TOKEN: null}\nrun: x",
            "t.yaml: `secrets.HF_TOKEN`: has no value: give it with --secret",
        ),
        (
            "workdir: /nonexistent/dir\nrun: x",
            "t.yaml: `workdir`: '/nonexistent/dir' is not a directory",
        ),
        (
            "resources: {job_recovery: {recover_on_exit_codes: [300]}}",
            "t.yaml: `resources.job_recovery.recover_on_exit_codes`: exit codes are 0 to 255",
        ),
    ],
)
def test_new_errors_name_the_field(text: str, message: str) -> None:
    """Pipelines, devices, secrets, workdirs and exit codes refused in one line naming the
    source and the field."""
    with pytest.raises(TaskError) as caught:
        load_managed_job(text, source="t.yaml")
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)
