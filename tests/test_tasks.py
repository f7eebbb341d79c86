"""SkyPilot task YAMLs (and batch/v1 Jobs) turned into the Jobs Berth runs as managed jobs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from berth_cli.tasks import ManagedJobSpec, TaskError, load_managed_job
from shared.tasks import (
    ACCELERATOR_LABEL,
    MAX_RESTARTS_ANNOTATION,
    SETUP_FAILED_EXIT_CODE,
)
from shared.workloads import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, workload_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Seed 000 (Trainy docs, "Using Skypilot with Kueue Priorities"), exactly as written.
SEED_000_LOW = """\
# low.yaml
resources:
    accelerators: T4:4
    labels:
        kueue.x-k8s.io/queue-name: user-queue # this is assigned by your admin
        kueue.x-k8s.io/priority-class: low-priority # specify low priority workload

run: |
    echo "hi i'm a low priority job"
    sleep 1000000
"""
SEED_000_HIGH = """\
# high.yaml
resources:
    accelerators: T4:4
    labels:
        kueue.x-k8s.io/queue-name: user-queue # this is the same as the queue above
        kueue.x-k8s.io/priority-class: high-priority # specify high-priority workload

run: |
    echo "hi i'm a high priority job"
    sleep 1000000
"""
# Seed 001 (SkyPilot docs, "Priority and Preemption"): high-priority-job.yaml.
SEED_001_HIGH = """\
# high-priority-job.yaml
resources:
  cloud: kubernetes
  cpus: 4

run: |
  python -c '
  import time
  for i in range(1000):
    print(f"High priority counter: {i}")
    time.sleep(1)
  '

experimental:
  config_overrides:
    kubernetes:
      pod_config:
        spec:
          priorityClassName: high-priority
"""
# Seed 002 (SkyPilot's examples/kueue README), step 1, including its trailing `...`.
SEED_002 = """\
resources:
  cpus: 6
  cloud: kubernetes
  labels:
    kueue.x-k8s.io/queue-name: user-queue
...
"""


def _container(spec: ManagedJobSpec) -> dict[str, Any]:
    container: dict[str, Any] = spec.job["spec"]["template"]["spec"]["containers"][0]
    return container


def _env(spec: ManagedJobSpec) -> dict[str, str]:
    return {item["name"]: item["value"] for item in _container(spec)["env"]}


def _run(spec: ManagedJobSpec, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the Job's container command as the local backend would: its env, no shell around it."""
    env = {"PATH": path if path is not None else os.environ["PATH"], **_env(spec)}
    return subprocess.run(
        _container(spec)["command"], env=env, capture_output=True, text=True, timeout=30
    )


def _task(body: str, **kwargs: Any) -> ManagedJobSpec:
    return load_managed_job(body, source="task.yaml", **kwargs)


# --- the seeds ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "priority"), [(SEED_000_LOW, "low-priority"), (SEED_000_HIGH, "high-priority")]
)
def test_seed_000_t4_tasks_request_four_gpus_in_user_queue(text: str, priority: str) -> None:
    """Seed 000's low.yaml/high.yaml request nvidia.com/gpu: 4 with the T4 label, queue and priority labels."""
    spec = load_managed_job(text, source="low.yaml")
    workload = workload_spec(spec.job)
    assert workload.kind == "Job"
    assert workload.pod_sets[0].count == 1
    assert workload.pod_sets[0].requests == {"nvidia.com/gpu": 4000}
    assert (spec.queue_name, spec.priority_class) == ("user-queue", priority)
    assert (workload.queue_name, workload.priority_class) == ("user-queue", priority)
    assert spec.priority_class_name == ""
    assert spec.resources == "1x[T4:4]"
    assert spec.name == "low"
    assert spec.max_restarts_on_errors == 0
    for labels in (
        spec.job["metadata"]["labels"],
        spec.job["spec"]["template"]["metadata"]["labels"],
    ):
        assert labels[QUEUE_NAME_LABEL] == "user-queue"
        assert labels[PRIORITY_CLASS_LABEL] == priority
        assert labels[ACCELERATOR_LABEL] == "T4"
    container = _container(spec)
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert _env(spec)["BERTH_TASK_RUN"].startswith("echo \"hi i'm a")


def test_seed_001_priority_class_name_comes_from_pod_config() -> None:
    """Seed 001's high-priority-job.yaml requests cpu 4 and sets spec.priorityClassName: high-priority."""
    spec = load_managed_job(SEED_001_HIGH, source="jobs/high-priority-job.yaml")
    workload = workload_spec(spec.job)
    assert workload.pod_sets[0].requests == {"cpu": 4000}
    assert workload.priority_class_name == "high-priority"
    assert spec.job["spec"]["template"]["spec"]["priorityClassName"] == "high-priority"
    assert spec.priority_class_name == "high-priority"
    assert (spec.queue_name, spec.priority_class) == ("", "")
    assert spec.resources == "1x[CPU:4]"
    assert spec.name == "high-priority-job"
    assert spec.ignored == ()
    assert "python -c '\nimport time\n" in _env(spec)["BERTH_TASK_RUN"]


def test_seed_002_task_with_document_end_marker_requests_six_cpus() -> None:
    """Seed 002's task (with its `...` end marker and no `run`) requests cpu 6 in user-queue and runs to exit 0."""
    spec = load_managed_job(SEED_002, source="sky-kueue-task.yaml", name="job1")
    workload = workload_spec(spec.job)
    assert workload.pod_sets[0].requests == {"cpu": 6000}
    assert workload.queue_name == spec.queue_name == "user-queue"
    assert spec.priority_class == ""
    assert spec.name == "job1"
    assert spec.resources == "1x[CPU:6]"
    assert _run(spec).returncode == 0


def test_priority_class_flag_overrides_the_task_label() -> None:
    """--priority-class replaces the task's kueue.x-k8s.io/priority-class on Job and pods."""
    spec = load_managed_job(SEED_000_LOW, source="low.yaml", priority_class="high-priority")
    assert spec.priority_class == "high-priority"
    assert workload_spec(spec.job).priority_class == "high-priority"
    assert (
        spec.job["spec"]["template"]["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "high-priority"
    )
    added = load_managed_job(SEED_002, source="t.yaml", priority_class="low-priority")
    assert added.priority_class == "low-priority" and added.queue_name == "user-queue"


# --- the Job's shape ------------------------------------------------------------------------


def test_job_shape_never_restarts_and_leaves_identity_to_the_caller() -> None:
    """The Job has restartPolicy Never, backoffLimit 0, no name/namespace and no managed-job label."""
    job = _task("run: echo hi").job
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert not {"name", "namespace", "uid"} & set(job["metadata"])
    assert "berth.dev/managed-job" not in job["metadata"]["labels"]
    container = _container(_task("run: echo hi"))
    assert container["name"] == "task" and container["image"] == "berth/task"
    assert container["command"][:2] == ["sh", "-c"]


def test_num_nodes_sets_parallelism_and_completions() -> None:
    """num_nodes: 2 gives parallelism = completions = 2 (Indexed) and the summary 2x[CPU:6, T4:1]."""
    spec = _task("num_nodes: 2\nresources: {cpus: 6+, accelerators: {T4: 1}}\nrun: echo hi")
    assert spec.job["spec"]["parallelism"] == spec.job["spec"]["completions"] == 2
    assert spec.job["spec"]["completionMode"] == "Indexed"
    assert workload_spec(spec.job).pod_sets[0].count == 2
    assert spec.resources == "2x[CPU:6, T4:1]"
    assert _env(spec)["SKYPILOT_NUM_NODES"] == "2"


@pytest.mark.parametrize(
    ("resources", "requests", "summary"),
    [
        ("{cpus: 4}", {"cpu": "4"}, "1x[CPU:4]"),
        ("{cpus: '4'}", {"cpu": "4"}, "1x[CPU:4]"),
        ("{cpus: 4+}", {"cpu": "4"}, "1x[CPU:4]"),
        ("{cpus: 0.5}", {"cpu": "500m"}, "1x[CPU:0.5]"),
        ("{cpus: 2, memory: 16}", {"cpu": "2", "memory": "16Gi"}, "1x[CPU:2]"),
        ("{memory: '16+'}", {"memory": "16Gi"}, "1x[-]"),
        ("{memory: 32GB}", {"memory": "32Gi"}, "1x[-]"),
        ("{memory: 512mb}", {"memory": "512Mi"}, "1x[-]"),
        ("{memory: 1.5}", {"memory": "1536Mi"}, "1x[-]"),
        ("{memory: 8Gi}", {"memory": "8Gi"}, "1x[-]"),
        ("{accelerators: T4}", {"nvidia.com/gpu": "1"}, "1x[T4:1]"),
        ("{accelerators: 'A100-80GB:8'}", {"nvidia.com/gpu": "8"}, "1x[A100-80GB:8]"),
        ("{accelerators: {L4: 2}}", {"nvidia.com/gpu": "2"}, "1x[L4:2]"),
        ("{accelerators: [H100:8, A100:8]}", {"nvidia.com/gpu": "8"}, "1x[H100:8]"),
        ("{accelerators: '{V100:2, A100:2}'}", {"nvidia.com/gpu": "2"}, "1x[V100:2]"),
        (
            "{cpus: 8, accelerators: 'T4:1.0'}",
            {"cpu": "8", "nvidia.com/gpu": "1"},
            "1x[CPU:8, T4:1]",
        ),
    ],
)
def test_resource_spellings(resources: str, requests: dict[str, str], summary: str) -> None:
    """SkyPilot's cpus/memory/accelerators spellings become Kubernetes requests (memory GB = GiB)."""
    spec = _task(f"resources: {resources}\nrun: echo hi")
    assert _container(spec)["resources"]["requests"] == requests
    assert spec.resources == summary
    workload_spec(spec.job)


def test_job_recovery_dict_and_string() -> None:
    """resources.job_recovery gives max_restarts_on_errors as a dict, 0 as a strategy string."""
    spec = _task(
        "resources: {job_recovery: {strategy: EAGER_NEXT_REGION, max_restarts_on_errors: 3}}"
    )
    assert spec.max_restarts_on_errors == 3
    assert spec.job["metadata"]["annotations"][MAX_RESTARTS_ANNOTATION] == "3"
    assert _task("resources: {job_recovery: FAILOVER}").max_restarts_on_errors == 0


def test_name_precedence() -> None:
    """-n NAME beats the task's name, which beats the file's stem."""
    assert load_managed_job("name: a\nrun: x", source="dir/b.yml", name="c").name == "c"
    assert load_managed_job("name: a\nrun: x", source="dir/b.yml").name == "a"
    assert load_managed_job("run: x", source="dir/b.yml").name == "b"


def test_config_pod_config_merges_labels_and_container_fields() -> None:
    """The newer `config:` spelling merges pod_config labels, tolerations and containers[0] env."""
    text = """\
config:
  kubernetes:
    provision_timeout: -1
    pod_config:
      metadata:
        labels: {kueue.x-k8s.io/queue-name: team-q}
      spec:
        priorityClassName: low-priority
        tolerations: [{key: gpu, operator: Exists}]
        containers:
          - env: [{name: EXTRA, value: "1"}]
run: echo hi
"""
    spec = _task(text)
    pod = spec.job["spec"]["template"]["spec"]
    assert spec.queue_name == "team-q" and spec.priority_class_name == "low-priority"
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert _env(spec)["EXTRA"] == "1" and "BERTH_TASK_RUN" in _env(spec)
    assert _container(spec)["command"][:2] == ["sh", "-c"]
    assert spec.ignored == ("config.kubernetes.provision_timeout",)


def test_accepted_but_unhonoured_fields_are_listed(tmp_path: Path) -> None:
    """use_spot, a bucket file mount and a service section are accepted and reported in
    `ignored`; a local workdir and file mount become annotations the local backend copies."""
    (tmp_path / "data").mkdir()
    text = (
        "workdir: .\nfile_mounts: {/data: ./data, /ckpt: s3://bucket/ckpt}\n"
        "resources: {use_spot: true}\nservice: {replicas: 2}\nrun: ls"
    )
    spec = load_managed_job(text, source="task.yaml", base_dir=tmp_path)
    assert spec.ignored == ("service", "resources.use_spot", "file_mounts./ckpt")
    annotations = spec.job["metadata"]["annotations"]
    assert annotations["berth.dev/workdir"] == str(tmp_path)
    assert annotations["berth.dev/file-mounts"] == f'{{"/data": "{tmp_path / "data"}"}}'


def test_image_id_docker_sets_the_image() -> None:
    """resources.image_id: docker:IMAGE becomes the container image."""
    assert (
        _container(_task("resources: {image_id: 'docker:ubuntu:22.04'}"))["image"] == "ubuntu:22.04"
    )


# --- the wrapper, actually run --------------------------------------------------------------


def test_setup_failure_exits_with_setup_failed_code() -> None:
    """A failing setup exits 86 and run never starts."""
    spec = _task("setup: |\n  echo setting up\n  exit 5\nrun: echo SHOULD-NOT-RUN")
    result = _run(spec)
    assert result.returncode == SETUP_FAILED_EXIT_CODE == 86
    assert "setting up" in result.stdout and "SHOULD-NOT-RUN" not in result.stdout


def test_run_exit_code_is_the_jobs() -> None:
    """After a successful setup, run's exit code (3) is the process's."""
    result = _run(_task("setup: echo ready\nrun: |\n  echo running\n  exit 3"))
    assert result.returncode == 3
    assert result.stdout.splitlines() == ["ready", "running"]


def test_run_is_not_set_e() -> None:
    """A failing command mid-run does not stop the script (no `set -e` imposed)."""
    result = _run(_task("run: |\n  false\n  echo after"))
    assert (result.returncode, result.stdout) == (0, "after\n")


def test_envs_are_visible_to_setup_and_run() -> None:
    """Task envs (numbers included) are in the environment of setup and run."""
    text = 'envs:\n  GREETING: hello world\n  COUNT: 3\nsetup: echo "setup $COUNT"\nrun: echo "$GREETING x$COUNT"'
    result = _run(_task(text))
    assert result.returncode == 0
    assert result.stdout == "setup 3\nhello world x3\n"


def test_quotes_and_dollar_vars_in_run_survive() -> None:
    """A run script with single and double quotes, $VARS and backslashes runs as written."""
    text = """\
envs:
  WHO: "it's me"
run: |
  echo "double \\"quoted\\" $WHO"
  echo 'single $WHO "inner"'
  X='a b'; echo "$X" "${X}c" \\$HOME
"""
    result = _run(_task(text))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        'double "quoted" it\'s me',
        'single $WHO "inner"',
        "a b a bc $HOME",
    ]


def test_wrapper_works_without_bash(tmp_path: Path) -> None:
    """With only `sh` on PATH the wrapper falls back to sh for setup and run."""
    sh = shutil.which("sh")
    assert sh is not None
    (tmp_path / "sh").symlink_to(sh)
    failed = _run(_task("setup: exit 1\nrun: echo no"), path=str(tmp_path))
    assert failed.returncode == SETUP_FAILED_EXIT_CODE
    ran = _run(
        _task("envs: {V: '$x'}\nsetup: 'true'\nrun: echo \"$V\"; exit 7"), path=str(tmp_path)
    )
    assert (ran.returncode, ran.stdout) == (7, "$x\n")


def test_node_rank_comes_from_the_completion_index() -> None:
    """SKYPILOT_NODE_RANK is the pod's JOB_COMPLETION_INDEX (0 when unset)."""
    spec = _task("num_nodes: 2\nrun: echo rank=$SKYPILOT_NODE_RANK")
    assert _run(spec).stdout == "rank=0\n"
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": "1", **_env(spec)}
    result = subprocess.run(_container(spec)["command"], env=env, capture_output=True, text=True)
    assert result.stdout == "rank=1\n"


# --- batch/v1 Job passthrough ---------------------------------------------------------------


def test_job_passthrough_keeps_the_job_and_reads_its_labels() -> None:
    """A batch/v1 Job passes through: identity stripped, labels give queue and priority, requests the summary."""
    text = (FIXTURES / "seed004-team-a-job.yaml").read_text()
    spec = load_managed_job(text, source="seed004-team-a-job.yaml")
    assert spec.name == "team-a-job"
    assert not {"name", "namespace"} & set(spec.job["metadata"])
    assert spec.job["spec"] == load_managed_job(text, source="x").job["spec"]
    assert (spec.queue_name, spec.priority_class) == ("local-queue", "prod-priority")
    assert spec.resources == "1x[CPU:7, GPU:2]"
    assert spec.max_restarts_on_errors == 0
    assert spec.job["spec"]["template"]["spec"]["containers"][0]["command"] == ["sleep", "3600"]


def test_job_passthrough_annotation_and_priority_flag() -> None:
    """The max-restarts annotation and --priority-class apply to a passed-through Job."""
    text = """\
apiVersion: batch/v1
kind: Job
metadata:
  annotations: {berth.dev/max-restarts-on-errors: "2"}
  labels: {berth.dev/accelerator: T4}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: a, image: x, resources: {requests: {cpu: 500m}, limits: {nvidia.com/gpu: 1}}}]
"""
    spec = load_managed_job(text, source="j.yaml", priority_class="high")
    assert spec.max_restarts_on_errors == 2
    assert spec.priority_class == "high" and spec.queue_name == ""
    assert spec.resources == "2x[CPU:0.5, T4:1]"
    assert spec.name == "j"


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resources: {cpus: 4x}", "task.yaml: `resources.cpus`: invalid value '4x'"),
        ("resources: {cpus: 0}", "task.yaml: `resources.cpus`: must be positive"),
        ("resources: {memory: 16G}", "task.yaml: `resources.memory`: invalid value '16G'"),
        (
            "resources: {accelerators: 'T4:0.5'}",
            "task.yaml: `resources.accelerators`: invalid count 0.5",
        ),
        (
            "resources: {accelerators: 'T4:two'}",
            "task.yaml: `resources.accelerators`: invalid value 'T4:two'",
        ),
        ("resources: {cloud: aws}", "task.yaml: `resources.cloud`: Berth runs tasks on Kubernetes"),
        ("resources: {gpus: 1}", "task.yaml: `resources.gpus`: unknown resources field"),
        (
            "resources: {job_recovery: {max_restarts_on_errors: -1}}",
            "task.yaml: `resources.job_recovery.max_restarts_on_errors`: must be a non-negative integer",
        ),
        (
            "resources: {labels: {kueue.x-k8s.io/queue-name: 3}}",
            "task.yaml: `resources.labels.kueue.x-k8s.io/queue-name`: must be a string",
        ),
        (
            "resources: {labels: {team: 'a b'}}",
            "task.yaml: `resources.labels.team`: 'a b' is not a valid Kubernetes label value",
        ),
        ("run: echo\nservices: {}", "task.yaml: `services`: unknown task field"),
        ("num_nodes: 0", "task.yaml: `num_nodes`: must be a positive integer"),
        ("run: [echo]", "task.yaml: `run`: must be a string"),
        ("envs: {1BAD: x}", "task.yaml: `envs.1BAD`: not a valid environment variable name"),
        ("envs: {TOKEN: null}", "task.yaml: `envs.TOKEN`: has no value"),
        ("envs: {BERTH_TASK_RUN: x}", "task.yaml: `envs.BERTH_TASK_RUN`: is reserved by Berth"),
        ("experimental: {foo: 1}", "task.yaml: `experimental.foo`: unknown field"),
        (
            "apiVersion: v1\nkind: Pod\nspec: {}",
            "task.yaml: `kind`: 'Pod' cannot be launched as a managed job",
        ),
        (
            "apiVersion: batch/v2\nkind: Job\nspec: {}",
            "task.yaml: Job does not exist in apiVersion 'batch/v2'",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {containers: []}}}",
            "task.yaml: `spec.template.spec.containers` must list at least one container",
        ),
        (
            "run: x\nconfig: {kubernetes: {pod_config: {spec: {containers: 3}}}}",
            "task.yaml: `config.kubernetes.pod_config.spec.containers`: must be a list, got 3",
        ),
        ("resources: {cpus: -1}", "task.yaml: `resources.cpus`: invalid value -1"),
        ("resources: [", "task.yaml: malformed YAML at line 1"),
        (
            "run: a\n---\napiVersion: batch/v1\nkind: Job",
            "task.yaml: 2 YAML documents with a Kubernetes object among them",
        ),
        ("- run: a", "task.yaml: expected a mapping"),
        ("", "task.yaml: empty file"),
    ],
)
def test_errors_name_the_field(text: str, message: str) -> None:
    """Each invalid input raises one TaskError line that names the source and field."""
    with pytest.raises(TaskError) as caught:
        _task(text)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_invalid_priority_class_flag_is_an_error() -> None:
    """--priority-class must be a valid label value."""
    with pytest.raises(TaskError, match=r"`--priority-class`: 'Not Valid' is not a valid"):
        _task("run: x", priority_class="Not Valid")
