"""kubectl's habits: short names, `get KIND NAME`, `-w`, `describe`, `apply -R`, `--dry-run`,
`version`. The live cases share one `berth up` (module scope) to keep the suite fast."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from berth_cli.applying import config_diff, input_files
from berth_cli.describe import fields
from berth_cli.getting import get
from berth_cli.kinds import config_names, resolve
from berth_cli.main import cli
from berth_cli.watching import RowPrinter
from tests.conftest import CLI_CREDENTIALS, FIXTURES, REPO, Stack, berth, pooled_stack
from tests.e2e import eventually, get_json, job_manifest, submit_manifest
from tests.stack_pool import StackPool

# (word, kind, why)
KIND_CASES = [
    ("wl", "Workload", "Kueue's short name for workloads"),
    ("cq", "ClusterQueue", "short name"),
    ("lq", "LocalQueue", "short name"),
    ("rf", "ResourceFlavor", "short name"),
    ("wpc", "WorkloadPriorityClass", "short name"),
    ("ClusterQueues", "ClusterQueue", "any case, plural"),
    ("flavor", "ResourceFlavor", "the word delete accepted before"),
    ("cohort", "Cohort", "singular"),
]


@pytest.mark.parametrize(
    ("word", "kind", "reason"), KIND_CASES, ids=[c[2] + ":" + c[0] for c in KIND_CASES]
)
def test_kind_words(word: str, kind: str, reason: str) -> None:
    """One alias table for get, describe and delete."""
    resource = resolve(word)
    assert resource is not None and resource.kind == kind, reason


# (short, long, why)
SHORT_CASES = [
    ("wl", "workloads", "from admission's status API"),
    ("cq", "clusterqueues", "from admission's status API"),
    ("lq", "localqueues", "from admission's status API"),
    ("rf", "resourceflavors", "a config kind, from the bucket"),
    ("wpc", "workloadpriorityclasses", "another config kind"),
    ("Cohort", "cohorts", "any case, singular"),
]


@pytest.mark.parametrize(("short", "long", "reason"), SHORT_CASES, ids=[c[0] for c in SHORT_CASES])
def test_get_short_names(short: str, long: str, reason: str) -> None:
    """`berth get SHORT` runs exactly `berth get LONG` (the live cases below use short names)."""
    with click.Context(get) as context:
        command = get.get_command(context, short)
        assert command is not None and command is get.get_command(context, long), reason


def test_delete_names_come_from_the_same_table() -> None:
    """Every config kind's words are delete's, and workloads are not config."""
    names = config_names()
    assert names["cq"] == "ClusterQueue" and names["wpc"] == "WorkloadPriorityClass"
    assert "wl" not in names and "workloads" not in names


def test_input_files_of_a_tree(tmp_path: Path) -> None:
    """A directory is its .yaml/.yml/.json files in name order; -R adds subdirectories."""
    for name in ("b.yaml", "a.yml", "c.json", "notes.txt", "sub/z.yaml", "sub/deeper/y.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    flat = [
        Path(p).relative_to(tmp_path).as_posix()
        for p in input_files(str(tmp_path), recursive=False)
    ]
    deep = [
        Path(p).relative_to(tmp_path).as_posix() for p in input_files(str(tmp_path), recursive=True)
    ]
    assert flat == ["a.yml", "b.yaml", "c.json"]
    assert deep == ["a.yml", "b.yaml", "c.json", "sub/deeper/y.yaml", "sub/z.yaml"]
    assert input_files("-", recursive=True) == ["-"]


def test_watch_prints_changed_rows_only() -> None:
    """-w: the table once, then a row again only when something but its AGE changed."""
    printer = RowPrinter(["NAME", "ADMITTED", "AGE"])
    first = printer.lines([("a", ["job-a", "", "1s"])])
    assert [line.split() for line in first] == [["NAME", "ADMITTED", "AGE"], ["job-a", "1s"]]
    assert printer.lines([("a", ["job-a", "", "2s"])]) == []  # only AGE moved
    assert printer.lines([("a", ["job-a", "True", "3s"])])[0].split() == ["job-a", "True", "3s"]


def test_describe_fields() -> None:
    """kubectl describe's layout: titled keys, aligned values, nested blocks indented."""
    assert fields({"queueName": "q", "podSets": [{"name": "main", "count": 2}]}) == [
        "Queue Name:  q",
        "Pod Sets:",
        "  - Name:   main",
        "    Count:  2",
    ]


# (key, its label, why): kubectl's smartLabelFor
LABEL_CASES = [
    ("queueName", "Queue Name", "a field's camel case is split and titled"),
    ("cpu", "Cpu", "a one-word field is titled, as kubectl titles it"),
    ("uid", "UID", "an acronym kubectl knows stays upper case"),
    ("apiVersion", "API Version", "an acronym at the start of a camel-cased field"),
    ("nvidia.com/gpu", "nvidia.com/gpu", "a resource name is a name, printed as it is"),
    ("kubernetes.io/metadata.name", "kubernetes.io/metadata.name", "a label key, as it is"),
    ("a_b", "a_b", "an underscore is not a letter: as it is"),
]


@pytest.mark.parametrize(("key", "label", "why"), LABEL_CASES, ids=[c[2] for c in LABEL_CASES])
def test_describe_labels_fields_and_keeps_names(key: str, label: str, why: str) -> None:
    assert fields({key: "v"}) == [f"{label}:  v"], why


def test_config_diff_is_unified() -> None:
    """A dry run's diff: the stored object against the applied one, as YAML."""
    diff = config_diff("clusterqueue/cq", b'{"spec":{"quota":1}}', b'{"spec":{"quota":2}}')
    assert diff[:2] == ["--- stored/clusterqueue/cq", "+++ applied/clusterqueue/cq"]
    assert "-  quota: 1" in diff and "+  quota: 2" in diff


@pytest.mark.parametrize("args", [["version"], ["--version"]], ids=["command", "flag"])
def test_version(args: list[str]) -> None:
    """`berth version` and `--version` print the package's version."""
    from importlib.metadata import version

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and result.output == f"berth {version('berth')}\n"


# --- on a live stack -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, stack_pool: StackPool
) -> Iterator[Stack]:
    """seed 003's queue (one GPU), a finished job, a running 1-GPU job and a pending one."""
    folder = tmp_path_factory.mktemp("kubectl")
    running = pooled_stack(request, stack_pool)
    try:
        url = running.url
        berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
        submit_manifest(url, folder, job_manifest("done", cpu=1, simulated_runtime="100ms"))
        submit_manifest(url, folder, job_manifest("runs", cpu=1, gpu=1))
        submit_manifest(url, folder, job_manifest("waits", cpu=1, gpu=1))
        eventually(lambda: len(get_json(url, "pending", "cluster-queue")) == 1)
        yield running
    finally:
        stack_pool.release(running)  # stopped in the background
        CLI_CREDENTIALS.pop(running.url, None)
        os.environ.pop("BERTH_CREDS", None)


# (args, first row's cells, why)
GET_ONE_CASES = [
    (["wl", "runs"], ["runs", "user-queue", "cluster-queue", "True", ""], "a workload by name"),
    (["cq", "cluster-queue"], ["cluster-queue", "1", "1"], "a ClusterQueue: 1 pending, 1 admitted"),
    (["lq", "user-queue"], ["user-queue", "cluster-queue", "1", "1"], "a LocalQueue"),
    (["wpc", "dev-priority"], ["dev-priority", "100"], "a priority class and its value"),
    (["rf", "default-flavor"], ["default-flavor"], "a flavor"),
]


@pytest.mark.parametrize(
    ("args", "cells", "reason"), GET_ONE_CASES, ids=[c[2] for c in GET_ONE_CASES]
)
def test_get_kind_name(live: Stack, args: list[str], cells: list[str], reason: str) -> None:
    """`berth get KIND NAME` prints that object's row only."""
    header, *rows = berth("get", *args, url=live.url).stdout.splitlines()
    assert header.startswith("NAME") and len(rows) == 1, reason
    row = rows[0].split()
    assert row[: len(cells)] == [c for c in cells if c] or row[: len(cells) - 1] == [
        c for c in cells if c
    ], reason


def test_get_kind_name_object_and_not_found(live: Stack) -> None:
    """-o json with a NAME is the object itself; a NAME that matches nothing fails."""
    obj = json.loads(berth("get", "cq", "cluster-queue", "-o", "json", url=live.url).stdout)
    assert obj["kind"] == "ClusterQueue" and obj["metadata"]["name"] == "cluster-queue"
    missing = berth("get", "wl", "nope", url=live.url, check=False)
    assert (
        missing.returncode == 1
        and 'workloads "nope" not found in namespace "default"' in missing.stderr
    )
    unknown = berth("get", "topologies", url=live.url, check=False)
    assert unknown.returncode == 1 and 'unknown resource type "topologies"' in unknown.stderr
    # the pending list of a ClusterQueue that does not exist is not an empty one
    nowhere = berth("get", "pending", "nosuch", url=live.url, check=False)
    assert nowhere.returncode == 1 and 'clusterqueues "nosuch" not found' in nowhere.stderr


# (args, lines expected in order, why)
DESCRIBE_CASES = [
    (
        ["wl", "runs"],
        [
            "Name:         runs",
            "Kind:         Workload",
            "  Conditions:",
            "QuotaReserved  True",
            "Events:",
            "Submitted",
            "QuotaReserved",
        ],
        "a workload's conditions, then its events from the stream",
    ),
    (
        ["wl", "waits"],
        ["Status:", "QuotaReserved  False  Pending", "Events:", "Submitted"],
        "a pending workload says why",
    ),
    (
        ["cq", "cluster-queue"],
        [
            "Quotas:",
            "default-flavor  nvidia.com/gpu  1",
            "Pending Workloads:    1",
            "Pending Workloads:",
            "default/waits",
        ],
        "a ClusterQueue's quotas, usage and pending workloads",
    ),
    (["wpc", "dev-priority"], ["Kind:         WorkloadPriorityClass", "Value:"], "a config object"),
]


@pytest.mark.parametrize(
    ("args", "expected", "reason"), DESCRIBE_CASES, ids=[c[2] for c in DESCRIBE_CASES]
)
def test_describe(live: Stack, args: list[str], expected: list[str], reason: str) -> None:
    """`berth describe` shows what kubectl describe would, in its order."""
    text = re.sub(" +", " ", berth("describe", *args, url=live.url).stdout)  # widths aside
    position = 0
    for fragment in expected:
        found = text.find(re.sub(" +", " ", fragment), position)
        assert found >= 0, f"{reason}: {fragment!r} not after position {position} in:\n{text}"
        position = found


def test_dry_run_writes_nothing(live: Stack, tmp_path: Path) -> None:
    """--dry-run: apply shows the change and its diff, submit shows what it would create;
    neither is stored."""
    url = live.url
    changed = (
        (FIXTURES / "seed003-kueue-resources.yaml")
        .read_text()
        .replace("nominalQuota: 1\n", "nominalQuota: 4\n")
    )
    path = tmp_path / "changed.yaml"
    path.write_text(changed)
    before = get_json(url, "cq")
    out = berth("apply", "-f", str(path), "--dry-run", url=url).stdout.splitlines()
    assert "clusterqueue.kueue.x-k8s.io/cluster-queue configured (dry run)" in out
    assert "resourceflavor.kueue.x-k8s.io/default-flavor unchanged" in out
    assert "-        nominalQuota: 1" in out and "+        nominalQuota: 4" in out
    assert get_json(url, "cq") == before

    job = job_manifest("never", cpu=1)
    (tmp_path / "never.json").write_text(json.dumps(job))
    printed = berth("submit", "-f", str(tmp_path / "never.json"), "--dry-run", url=url).stdout
    assert printed == "job.batch/never created (dry run)\n"
    assert "never" not in {w["metadata"]["name"] for w in get_json(url, "wl")}
    exists = job_manifest("runs", cpu=1)
    (tmp_path / "runs.json").write_text(json.dumps(exists))
    refused = berth("submit", "-f", str(tmp_path / "runs.json"), "--dry-run", url=url, check=False)
    assert refused.returncode == 1 and "'runs' already exists" in refused.stderr


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["rf"], "a List of every flavor, as `berth get -o yaml` prints it"),
        (["cq", "cluster-queue"], "one object with its status and creationTimestamp"),
    ],
    ids=["list", "one object"],
)
def test_get_output_applies_unchanged(
    live: Stack, tmp_path: Path, args: list[str], why: str
) -> None:
    """What `berth get -o yaml` prints applies back as it is, as with kubectl: a List is
    its items, and what the server set (status, creationTimestamp) is not a change."""
    path = tmp_path / "exported.yaml"
    path.write_text(berth("get", *args, "-o", "yaml", url=live.url).stdout)
    lines = berth("apply", "-f", str(path), "--dry-run", url=live.url).stdout.splitlines()
    assert lines and all(line.endswith(" unchanged") for line in lines), (why, lines)


def test_apply_recursive_tree(live: Stack, tmp_path: Path) -> None:
    """apply -f DIR reads its .yaml/.yml/.json files in order; -R goes down the tree."""
    flavor = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {{name: {}}}\n"
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "b.yaml").write_text(flavor.format("tree-b"))
    (tmp_path / "a.yml").write_text(flavor.format("tree-a"))
    (tmp_path / "notes.txt").write_text("not read")
    (tmp_path / "sub" / "c.json").write_text(
        json.dumps(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ResourceFlavor",
                "metadata": {"name": "tree-c"},
            }
        )
    )
    (tmp_path / "sub" / "deeper" / "d.yaml").write_text(flavor.format("tree-d"))
    flat = berth("apply", "-f", str(tmp_path), url=live.url).stdout.splitlines()
    assert flat == [
        "resourceflavor.kueue.x-k8s.io/tree-a created",
        "resourceflavor.kueue.x-k8s.io/tree-b created",
    ]
    deep = berth("apply", "-f", str(tmp_path), "-R", url=live.url).stdout.splitlines()
    assert deep == [
        "resourceflavor.kueue.x-k8s.io/tree-a unchanged",
        "resourceflavor.kueue.x-k8s.io/tree-b unchanged",
        "resourceflavor.kueue.x-k8s.io/tree-c created",  # sub/c.json before sub/deeper/
        "resourceflavor.kueue.x-k8s.io/tree-d created",
    ]


def test_watch_follows_a_new_workload(live: Stack, tmp_path: Path) -> None:
    """`get wl -w` prints a row for a workload submitted while it watches; Ctrl-C: exit 0."""
    url = live.url
    process = subprocess.Popen(
        [sys.executable, "-m", "berth_cli", "get", "wl", "-w"],
        env={**os.environ, "BERTH_NATS_URL": url, "BERTH_CREDS": CLI_CREDENTIALS[url]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    finished = ["watched", "user-queue", "cluster-queue", "True", "True"]
    lines: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lines.extend, args=(process.stdout,), daemon=True)
    reader.start()
    try:
        eventually(lambda: lines, timeout=20, interval=0.05)  # its first listing is out
        submit_manifest(url, tmp_path, job_manifest("watched", cpu=1, simulated_runtime="100ms"))
        # Polls until it appears, then until it has finished.
        eventually(lambda: any(line.split()[:5] == finished for line in lines), interval=0.05)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(10)
        reader.join(10)
        assert process.stderr is not None
        stderr = process.stderr.read()
    assert process.returncode == 0 and "Traceback" not in stderr, stderr
    lines = "".join(lines).splitlines()
    assert lines[0].split()[:2] == ["NAME", "QUEUE"]
    watched = [line.split() for line in lines if line.startswith("watched ")]
    assert watched and watched[-1][:5] == finished
