"""`berth events`: subject filters, the client-side remainder, and a live tap on `berth up`."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from berth_cli.client import CliError
from berth_cli.events import EVENT_TYPES, EventFilter, Tap, detail, resolve_types, subjects_for
from shared.events import SUBJECT_PARTS
from tests.conftest import CLI_CREDENTIALS, FIXTURES, REPO, Stack, berth
from tests.e2e import job_manifest, submit_manifest

# (filter, subject filters, why)
SUBJECT_CASES = [
    (EventFilter(), ["berth.>"], "no filter: everything, newer families included"),
    (
        EventFilter(namespace="team-a"),
        [
            "berth.wl.*.team-a.*",
            "berth.cq.*.*.team-a.*",
            "berth.cmd.*.team-a.*",
            "berth.job.status.*",
            "berth.job.boost.team-a.*",
            "berth.check.*.team-a.*",
        ],
        "a namespace is a token of every family but job status (its subject ends in an id)",
    ),
    (
        EventFilter(namespace="default", cluster_queue="cq-1"),
        [
            "berth.wl.*.default.*",
            "berth.cq.cq-1.*.default.*",
            "berth.cmd.*.default.*",
            "berth.job.status.*",
            "berth.job.boost.default.*",
            "berth.check.*.default.*",
        ],
        "a ClusterQueue narrows the decisions; facts are kept by the workloads it decided",
    ),
    (
        EventFilter(namespace="default", types=frozenset({"WorkloadAdmitted", "WorkloadFinished"})),
        ["berth.cq.*.admitted.default.*", "berth.wl.finished.default.*"],
        "types pick one verb each",
    ),
    (
        EventFilter(types=frozenset({"JobStatusChanged"})),
        ["berth.job.status.*"],
        "a job's status in any namespace",
    ),
    (
        EventFilter(namespace="a.b", cluster_queue="x.y", types=frozenset({"WorkloadPending"})),
        ["berth.cq.x_y.pending.a_b.*"],
        "dots in names are _ in subjects",
    ),
]


@pytest.mark.parametrize(
    ("wanted", "expected", "reason"), SUBJECT_CASES, ids=[c[2] for c in SUBJECT_CASES]
)
def test_subject_filters(wanted: EventFilter, expected: list[str], reason: str) -> None:
    """The consumer's filters are the subjects the matching events are published on."""
    assert subjects_for(wanted) == expected, reason


def test_event_types_follow_the_contract() -> None:
    """Every workload event shared/events.py publishes is a --type, on its family and verb
    (a leader's marker is about no workload: it shows with no filter, under berth.>)."""
    published = {kind.__name__: pair for kind, pair in SUBJECT_PARTS.items() if pair[0] != "lease"}
    assert {name: EVENT_TYPES.get(name) for name in published} == published


# (typed, resolved, why)
TYPE_CASES = [
    (["admitted"], {"WorkloadAdmitted"}, "the subject verb"),
    (["WorkloadFinished", "evict"], {"WorkloadFinished", "EvictionRequested"}, "names and verbs"),
    (["workloadpending"], {"WorkloadPending"}, "any case"),
]


@pytest.mark.parametrize(
    ("typed", "resolved", "reason"), TYPE_CASES, ids=[c[2] for c in TYPE_CASES]
)
def test_resolve_types(typed: list[str], resolved: set[str], reason: str) -> None:
    """--type takes a type name or its verb."""
    assert resolve_types(typed) == resolved, reason


def test_unknown_type_names_the_choices() -> None:
    """A typo is refused with the verbs one may use."""
    with pytest.raises(CliError, match=r"unknown event type 'admited'.*admitted"):
        resolve_types(["admited"])


def _event(kind: str, uid: str, namespace: str = "default", **fields: Any) -> dict[str, Any]:
    return {"type": kind, "workload": {"namespace": namespace, "name": uid, "uid": uid}, **fields}


def test_cluster_queue_keeps_facts_of_its_workloads() -> None:
    """A fact names no ClusterQueue: it shows once a decision placed its workload there."""
    tap = Tap(EventFilter(cluster_queue="cq-1"))
    assert not tap.keep(_event("WorkloadSubmitted", "a"))  # not placed yet
    assert tap.keep(_event("WorkloadAdmitted", "a", cluster_queue="cq-1"))
    assert tap.keep(_event("WorkloadFinished", "a"))
    assert not tap.keep(_event("WorkloadAdmitted", "b", cluster_queue="cq-2"))
    assert not tap.keep(_event("WorkloadFinished", "b"))


def test_namespace_is_checked_on_the_body() -> None:
    """A job's status subject has no namespace; its body does."""
    tap = Tap(EventFilter(namespace="team-a"))
    assert tap.keep(_event("JobStatusChanged", "a", namespace="team-a"))
    assert not tap.keep(_event("JobStatusChanged", "b", namespace="team-b"))


# (event, detail, why)
DETAIL_CASES = [
    (
        _event("WorkloadPending", "a", reason="Pending", message="insufficient quota"),
        "Pending: insufficient quota",
        "reason and message",
    ),
    (
        _event("EvictionRequested", "a", reason="Preempted", detail="InClusterQueue", message="m"),
        "Preempted/InClusterQueue: m",
        "Kueue's eviction reason and preemption detail",
    ),
    (
        _event("WorkloadFinished", "a", succeeded=False, exit_code=3, message=""),
        "Failed (exit 3)",
        "the outcome",
    ),
    (
        _event("PriorityBoosted", "a", boost=40, reserved=True),
        "ageing boost +40, reserved",
        "boost",
    ),
    (_event("LeaderElected", "", role="admission"), "", "a type from a newer Berth still shows"),
    (_event("WorkloadPodsReady", "a", generation=2), "generation 2", "pods ready"),
    (
        _event("WorkloadPodsReady", "a", generation=2, ready=False),
        "generation 2, not ready any more",
        "readiness lost (recoveryTimeout counts from it)",
    ),
]


@pytest.mark.parametrize(("body", "text", "reason"), DETAIL_CASES, ids=[c[2] for c in DETAIL_CASES])
def test_detail(body: dict[str, Any], text: str, reason: str) -> None:
    """The DETAIL column says why, in one line."""
    assert detail(body) == text, reason


class _Lines:
    """A subprocess's stdout lines, read in a thread so the test can wait with a timeout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(
            target=lambda: [self.queue.put(line) for line in stdout], daemon=True
        ).start()

    def until(self, done: Any, *, timeout: float) -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while not done(seen):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"not seen within {timeout}s; got:\n{''.join(seen)}"
            try:
                seen.append(self.queue.get(timeout=remaining))
            except queue.Empty:
                continue
        return seen


def test_follow_shows_a_workload_from_submit_to_finish(stack: Stack, tmp_path: Path) -> None:
    """`berth events -o json -f` prints the workload's events as they happen, one JSON object
    per line; Ctrl-C ends it with exit 0 and no traceback; without -f it stops at the end."""
    url = stack.url
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
    process = subprocess.Popen(
        [sys.executable, "-m", "berth_cli", "events", "-o", "json", "-f"],
        env={**os.environ, "BERTH_NATS_URL": url, "BERTH_CREDS": CLI_CREDENTIALS[url]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        lines = _Lines(process)
        time.sleep(0.5)  # the tap is following before the workload exists
        submit_manifest(url, tmp_path, job_manifest("tapped", cpu=1, simulated_runtime="300ms"))

        def finished(seen: list[str]) -> bool:
            return any(json.loads(line)["type"] == "WorkloadFinished" for line in seen)

        seen = [json.loads(line) for line in lines.until(finished, timeout=20)]
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0 and "Traceback" not in stderr, stderr
    types = [event["type"] for event in seen if event["workload"]["name"] == "tapped"]
    for expected in (
        "WorkloadSubmitted",
        "WorkloadAdmitted",
        "WorkloadStarted",
        "WorkloadFinished",
    ):
        assert expected in types, types
    assert types.index("WorkloadSubmitted") < types.index("WorkloadAdmitted")
    assert types.index("WorkloadAdmitted") < types.index("WorkloadFinished")

    table = berth("events", "--type", "admitted", "--cluster-queue", "cluster-queue", url=url)
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["TIME", "TYPE", "NAMESPACE/NAME", "CLUSTERQUEUE", "DETAIL"]
    assert [row.split()[1:4] for row in rows] == [
        ["WorkloadAdmitted", "default/tapped", "cluster-queue"]
    ]
    assert berth("events", "-n", "elsewhere", url=url).stdout == (
        "No events found in elsewhere namespace.\n"
    )

    # `| head -1`: berth stops quietly when its reader goes, its subscription closed on the
    # open connection (it was left to the loop's finalizer, which logged a traceback). Read
    # the header, close the pipe, then make an event to print: the next print breaks it.
    reader = subprocess.Popen(
        [sys.executable, "-m", "berth_cli", "events", "-A", "-f"],
        env={**os.environ, "BERTH_NATS_URL": url, "BERTH_CREDS": CLI_CREDENTIALS[url]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert reader.stdout is not None and reader.stdout.readline().startswith("TIME")
    reader.stdout.close()
    submit_manifest(url, tmp_path, job_manifest("piped", cpu=1, simulated_runtime="100ms"))
    try:
        _, stderr = reader.communicate(timeout=20)
    finally:
        reader.kill()
    assert reader.returncode == 0 and stderr == "", stderr
