"""examples/ end to end on `berth up`: the README's session, every workload kind, a pod group
admitted whole or not at all. The kinds share one stack (module scope) to keep this cheap."""

from __future__ import annotations

import filecmp
import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from shared.events import WorkloadAdmitted, WorkloadStarted
from tests.conftest import (
    CLI_CREDENTIALS,
    FIXTURES,
    REPO,
    Stack,
    berth,
    pooled_stack,
)
from tests.e2e import condition, event_log, eventually, get_json, is_admitted
from tests.readme import Step, created_names, matches, started_as_shown, walkthroughs
from tests.stack_pool import StackPool

EXAMPLES = REPO / "examples"
KINDS = EXAMPLES / "kinds"


@pytest.fixture(scope="module")
def shared_stack(request: pytest.FixtureRequest, stack_pool: StackPool) -> Iterator[Stack]:
    running = pooled_stack(request, stack_pool)
    try:
        yield running
    finally:
        stack_pool.release(running)  # stopped in the background
        CLI_CREDENTIALS.pop(running.url, None)
        os.environ.pop("BERTH_CREDS", None)


def _workloads(url: str, namespace: str = "default") -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in get_json(url, "workloads", "-n", namespace)}


def _created(output: str) -> list[str]:
    """The names `berth submit` printed: `<resource>/<name> created`."""
    return [line.split("/", 1)[1].split()[0] for line in output.splitlines() if "created" in line]


def test_readme_session(stack: Stack) -> None:
    """README, "A session": kueue-resources.yaml's one GPU, gpu-job.yaml submitted three
    times: one admitted, two pending saying why."""
    url = stack.url
    applied = berth("apply", "-f", str(EXAMPLES / "kueue-resources.yaml"), url=url).stdout
    assert "localqueue.kueue.x-k8s.io/user-queue created" in applied
    names = []
    for _ in range(3):
        names += _created(berth("submit", "-f", str(EXAMPLES / "gpu-job.yaml"), url=url).stdout)
    assert len(set(names)) == 3 and all(n.startswith("gpu-job-") for n in names)

    def one_admitted() -> bool:
        workloads = _workloads(url)
        assert sum(is_admitted(w) for w in workloads.values()) == 1
        pending = [w for w in workloads.values() if not is_admitted(w)]
        for workload in pending:
            reserved = condition(workload, "QuotaReserved")
            assert (
                reserved and "insufficient unused quota for nvidia.com/gpu" in reserved["message"]
            )
        return len(pending) == 2

    eventually(one_admitted)
    table = berth("get", "clusterqueues", url=url).stdout
    assert table.split("\n")[1].split() == ["cluster-queue", "2", "1"]


README = REPO / "README.md"


def test_readme_names_only_files_that_exist() -> None:
    """Every relative link of README.md and every `examples/...` or `docs/...` path it names
    exists (the walkthroughs' files among them)."""
    text = README.read_text()
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    paths = re.findall(r"(?<![\w/.])((?:examples|docs|deploy)/[\w./-]*[\w/])", text)
    assert "examples/gpu-job.yaml" in paths and "docs/README.md" in links
    missing = sorted({p for p in [*links, *paths] if not (REPO / p).exists()})
    assert not missing, missing


def test_readme_walkthroughs_are_found() -> None:
    """The parser sees both walkthroughs, the second on a fresh stack, every command of
    theirs with the output the README shows."""
    found = walkthroughs(README.read_text())
    assert [(w.section, w.fresh_stack) for w in found] == [
        ("A session", True),
        ("Managed jobs", True),
    ]
    session, jobs = found
    assert [s.args[0] for s in session.steps].count("submit") == 3
    assert all(step.expected for w in found for step in w.steps), "a step shows no output"
    assert session.up_data_dir == "/tmp/berth" and session.up_output[0].split()[0] == "COMPONENT"
    assert [s.args[:2] for s in jobs.steps if not s.read_only] == [
        ("apply", "-f"),
        ("apply", "-f"),
        ("jobs", "launch"),
        ("jobs", "launch"),
    ]


def _run_step(step: Step, url: str, names: dict[str, str]) -> list[str]:
    """Run one step; its output must be the README's (generated names mapped as `submit`
    printed them)."""
    actual = berth(*step.args, url=url).stdout.splitlines()
    names.update(zip(created_names(step.expected), created_names(actual), strict=True))
    assert matches(step.expected, actual, names), (step.line, step.expected, actual)
    return actual


def test_readme_walkthroughs_run_as_written(
    request: pytest.FixtureRequest, stack_pool: StackPool
) -> None:
    """Each README walkthrough's commands, in order, as README.md shows them, print what it
    shows: a step that changes something runs once; one that reads runs until the state it
    shows is reached. `berth up` in a walkthrough is a fresh stack, which prints what the
    README shows it print, if it shows anything (a fresh stack of the session's pool: the
    next one starts while a walkthrough runs, a used one stops behind it: tests/stack_pool.py)."""
    found = walkthroughs(README.read_text())
    running: Stack | None = None
    try:
        for index, walkthrough in enumerate(found):
            if running is None or walkthrough.fresh_stack:
                if running is not None:
                    stack_pool.release(running)
                    CLI_CREDENTIALS.pop(running.url, None)
                another = any(later.fresh_stack for later in found[index + 1 :])
                running = pooled_stack(request, stack_pool, more=another)
                if walkthrough.up_output:
                    printed = running.output[: len(walkthrough.up_output)]
                    data_dir = str(running.data_dir)
                    assert started_as_shown(walkthrough, printed, data_dir), printed
            names: dict[str, str] = {}
            for step in walkthrough.steps:
                url = running.url
                if step.read_only:
                    eventually(lambda: _run_step(step, url, names), timeout=60)  # noqa: B023
                else:
                    _run_step(step, url, names)
    finally:
        if running is not None:
            stack_pool.release(running)
            CLI_CREDENTIALS.pop(running.url, None)
        os.environ.pop("BERTH_CREDS", None)


def test_managed_jobs_examples_are_the_files_seed_001_runs() -> None:
    """README, "Managed jobs": examples/managed-jobs/ are the files test_seed_001 runs end
    to end (tests/test_e2e_recovery.py), byte for byte."""
    for path in sorted((EXAMPLES / "managed-jobs").glob("*.yaml")):
        assert filecmp.cmp(path, FIXTURES / "seed001" / path.name, shallow=False), path.name


# Every kind's file, and the pod sets it must show: (pod set name, count).
KIND_FILES: list[tuple[str, list[tuple[str, int]]]] = [
    ("job.yaml", [("main", 2)]),
    ("pod.yaml", [("main", 1)]),
    ("jobset.yaml", [("workers", 4), ("driver", 1)]),
    ("pytorchjob.yaml", [("master", 1), ("worker", 2)]),
    ("tfjob.yaml", [("ps", 1), ("worker", 2)]),
    ("xgboostjob.yaml", [("master", 1), ("worker", 2)]),
    ("paddlejob.yaml", [("master", 1), ("worker", 2)]),
    ("jaxjob.yaml", [("worker", 2)]),
    ("mpijob.yaml", [("launcher", 1), ("worker", 2)]),
    ("rayjob.yaml", [("head", 1), ("small-group", 1)]),
    ("raycluster.yaml", [("head", 1), ("small-group", 2)]),
    ("leaderworkerset.yaml", [("leader", 2), ("worker", 4)]),
    ("appwrapper.yaml", [("sample-appwrapper-0", 1), ("sample-appwrapper-1", 1)]),
    ("deployment.yaml", [("main", 3)]),
    ("statefulset.yaml", [("main", 3)]),
    ("pod-group.yaml", [("*", 1), ("*", 1)]),  # two shapes: pod sets named by shape hash
]


def test_every_kind_runs_on_the_local_backend(shared_stack: Stack) -> None:
    """Each example kind is submitted, admitted with Kueue's pod sets, runs its pod sets'
    commands as processes (or its simulated runtime) and succeeds; a JobSet's every pod
    ran and logged."""
    url = shared_stack.url
    berth("apply", "-f", str(EXAMPLES / "queues.yaml"), url=url)
    output = berth("submit", "-f", str(KINDS), url=url).stdout  # the folder, in name order
    assert sorted(f.name for f in KINDS.glob("*.yaml")) == sorted(f for f, _ in KIND_FILES)
    names = iter(_created(output))
    submitted: dict[str, list[tuple[str, int]]] = {}
    for file, pod_sets in sorted(KIND_FILES):
        name = next(names)
        if file == "pod-group.yaml":
            assert next(names) == "sample-group-worker"  # its second pod
            name = "sample-group"
        submitted[name] = pod_sets

    def all_succeeded() -> dict[str, dict[str, Any]]:
        workloads = _workloads(url)
        for name in submitted:
            finished = condition(workloads[name], "Finished")
            assert finished and finished["status"] == "True", name
            assert finished["reason"] == "Succeeded", (name, finished)
        return workloads

    workloads = eventually(all_succeeded, timeout=60)
    for name, pod_sets in submitted.items():
        shown = [(p["name"], p["count"]) for p in workloads[name]["spec"]["podSets"]]
        if name == "sample-group":
            shown = [("*", count) for _, count in shown]
        assert shown == pod_sets, name
    jobset = next(n for n in submitted if n.startswith("sample-jobset-"))
    logs = shared_stack.data_dir / "logs" / "default" / jobset
    texts = sorted(path.read_text().strip() for path in logs.glob("*.log"))
    assert texts == ["driver done", *(f"worker {i} done" for i in range(4))]


def _split(file: Path, folder: Path) -> list[Path]:
    """One file per document (to submit a group's pods one at a time)."""
    paths = []
    for index, document in enumerate(yaml.safe_load_all(file.read_text())):
        path = folder / f"{file.stem}-{index}.yaml"
        path.write_text(yaml.safe_dump(document))
        paths.append(path)
    return paths


GROUPS_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: groups, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""
BLOCKER = """
apiVersion: batch/v1
kind: Job
metadata: {name: blocker, labels: {kueue.x-k8s.io/queue-name: user-queue}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, command: [sleep, "600"], resources: {requests: {cpu: "4"}}}]
"""


def test_a_pod_group_is_admitted_whole_or_not_at_all(shared_stack: Stack, tmp_path: Path) -> None:
    """A group of 3 + 2 CPUs with 4 free: its leader alone would fit, but nothing of the
    group runs, not even once all its pods exist; when the blocker goes, both pods start
    in one admission of the one workload `sample-group`. (In namespace `groups`, with a
    LocalQueue `user-queue` of its own, on the shared stack.)"""
    url = shared_stack.url
    berth("apply", "-f", str(EXAMPLES / "queues.yaml"), url=url)
    (tmp_path / "queue.yaml").write_text(GROUPS_QUEUE)
    berth("apply", "-f", str(tmp_path / "queue.yaml"), url=url)
    (tmp_path / "blocker.yaml").write_text(BLOCKER)
    berth("submit", "-n", "groups", "-f", str(tmp_path / "blocker.yaml"), url=url)
    eventually(lambda: is_admitted(_workloads(url, "groups")["blocker"]))
    leader, worker = _split(KINDS / "pod-group.yaml", tmp_path)

    berth("submit", "-n", "groups", "-f", str(leader), url=url)
    assert "sample-group" not in _workloads(url, "groups")  # one pod of two: no workload yet
    berth("submit", "-n", "groups", "-f", str(worker), url=url)

    def pending_whole() -> dict[str, Any]:
        group = _workloads(url, "groups")["sample-group"]
        reserved = condition(group, "QuotaReserved")
        assert reserved and reserved["status"] == "False", group["status"]
        assert "insufficient unused quota for cpu" in reserved["message"]
        return group

    group = eventually(pending_whole)
    assert sorted(p["count"] for p in group["spec"]["podSets"]) == [1, 1]
    logs = shared_stack.data_dir / "logs" / "groups" / "sample-group"
    assert not logs.exists()

    berth("delete", "workload", "-n", "groups", "blocker", url=url)
    eventually(lambda: condition(_workloads(url, "groups")["sample-group"], "Finished"), timeout=30)
    assert sorted(p.name for p in logs.glob("*.log")) == [
        "1-sample-group-leader.log",
        "1-sample-group-worker.log",
    ]
    events = [e for e in event_log(url) if e.workload.namespace == "groups"]
    group_events = [e for e in events if e.workload.name == "sample-group"]
    assert [type(e) for e in group_events if isinstance(e, WorkloadAdmitted | WorkloadStarted)] == [
        WorkloadAdmitted,
        WorkloadStarted,
    ]
    assert not any(  # its pods are never workloads of their own
        e.workload.name.startswith("sample-group-")
        for e in events
        if isinstance(e, WorkloadAdmitted)
    )


TASKS = EXAMPLES / "tasks"


def _jobs(url: str) -> dict[int, dict[str, Any]]:
    output = berth("jobs", "queue", "-o", "json", url=url).stdout
    return {job["id"]: job for job in json.loads(output)}


def _launch(url: str, *args: str) -> tuple[int, str]:
    result = berth("jobs", "launch", *args, url=url)
    words = result.stdout.split()
    assert words[:3] == ["Managed", "job", "ID:"], result.stdout + result.stderr
    return int(words[3]), result.stderr


def test_a_pipeline_runs_its_tasks_in_order(shared_stack: Stack) -> None:
    """examples/tasks/pipeline.yaml: one managed job, its three tasks one after the other,
    each SUCCEEDED under the job's row in `berth jobs queue`."""
    url = shared_stack.url
    berth("apply", "-f", str(EXAMPLES / "queues.yaml"), url=url)
    job_id, _ = _launch(url, str(TASKS / "pipeline.yaml"))
    eventually(lambda: _jobs(url)[job_id]["status"] == "SUCCEEDED", timeout=60)
    record = _jobs(url)[job_id]
    assert record["name"] == "prep-train-eval"
    assert [(t["name"], t["status"]) for t in record["tasks"]] == [
        ("prep", "SUCCEEDED"),
        ("train", "SUCCEEDED"),
        ("eval", "SUCCEEDED"),
    ]
    assert [a["name"] for a in record["attempts"]] == [
        f"prep-train-eval-{job_id}",
        f"prep-train-eval-{job_id}-t1",
        f"prep-train-eval-{job_id}-t2",
    ]
    table = berth("jobs", "queue", url=url).stdout
    rows = [line.split() for line in table.splitlines() if "↳" in line]
    assert [(row[1], row[2], row[-1]) for row in rows] == [
        ("0:", "prep", "SUCCEEDED"),
        ("1:", "train", "SUCCEEDED"),
        ("2:", "eval", "SUCCEEDED"),
    ]
    output = berth("jobs", "logs", str(job_id), url=url).stdout
    assert output.index("prep: tokenising") < output.index("train: epoch") < output.index("eval:")


def test_secrets_envs_and_files(shared_stack: Stack) -> None:
    """examples/tasks/secrets-and-files.yaml with --env and --secret: the run sees the env,
    the secret and its copied workdir and file mount; the secret's value is nowhere else:
    not in the watcher's or recovery's log, the job record, the events or the CLI's output."""
    url = shared_stack.url
    berth("apply", "-f", str(EXAMPLES / "queues.yaml"), url=url)
    value = "hf-" + secrets.token_hex(12)
    result = berth(
        "jobs",
        "launch",
        str(TASKS / "secrets-and-files.yaml"),
        "--env",
        "MODEL=large",
        "--secret",
        f"HF_TOKEN={value}",
        url=url,
    )
    job_id = int(result.stdout.split()[3])
    eventually(lambda: _jobs(url)[job_id]["status"] == "SUCCEEDED", timeout=30)
    output = berth("jobs", "logs", str(job_id), url=url).stdout
    assert "model: large" in output
    assert f"token has {len(value)} characters" in output
    assert "training for 2 epochs at lr 0.001" in output
    places = {
        "launch output": result.stdout + result.stderr,
        "job record": berth("jobs", "queue", "-o", "json", url=url).stdout,
        "events": json.dumps([msgspec.to_builtins(e) for e in event_log(url)]),
        "job logs": output,
    }
    for log in (shared_stack.data_dir / "logs").glob("*.log"):
        places[log.name] = log.read_text()
    assert {"watcher.log", "recovery.log"} <= set(places)
    for where, text in places.items():
        assert value not in text, where


def test_accelerator_candidates_asked_of_the_queue(shared_stack: Stack) -> None:
    """examples/tasks/accelerators.yaml on gpu-queues.yaml: no H100 flavor, so L4 runs."""
    url = shared_stack.url
    berth("apply", "-f", str(TASKS / "gpu-queues.yaml"), url=url)
    job_id, _ = _launch(url, str(TASKS / "accelerators.yaml"))
    assert _jobs(url)[job_id]["resources"] == "1x[L4:1]"
    eventually(lambda: _jobs(url)[job_id]["status"] == "SUCCEEDED", timeout=30)


def test_launch_warns_of_each_ignored_field(shared_stack: Stack, tmp_path: Path) -> None:
    """`berth jobs launch` says, on stderr, one line per field it accepts and ignores."""
    task = tmp_path / "serve.yaml"
    task.write_text("service: {replicas: 2}\nresources: {cpus: 1, use_spot: true}\nrun: echo hi\n")
    _, stderr = _launch(shared_stack.url, str(task))
    assert stderr.splitlines() == [
        f"berth: warning: {task}: service is not supported and is ignored",
        f"berth: warning: {task}: resources.use_spot is not supported and is ignored",
    ]
