"""Names at the CLI: every name a command is given is checked as Kubernetes does, before
anything is sent; a bad one is one clear line naming the field and the value, never a
traceback. No NATS needed: nothing gets that far."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import berth

NOWHERE = "nats://127.0.0.1:1"  # a refused connection: only a check that fails first passes


def job_yaml(name: str = "ok", *, extra: str = "") -> str:
    return (
        "apiVersion: batch/v1\nkind: Job\n"
        f"metadata: {{name: {name}, labels: {{kueue.x-k8s.io/queue-name: lq}}{extra}}}\n"
        "spec: {template: {spec: {containers: [{name: c, command: [\"true\"]}]}}}\n"
    )


CASES = [
    # (command, file content or None, expected message, why)
    (["submit", "-f", "{file}"], job_yaml('"/tmp/x"'), 'metadata.name "/tmp/x" is not a valid name: a lowercase RFC 1123 subdomain', "a path: its logs once landed in /tmp"),
    (["submit", "-f", "{file}"], job_yaml('"../../etc"'), 'metadata.name "../../etc" is not a valid name', "a relative path"),
    (["submit", "-f", "{file}"], job_yaml("a" * 300), "(300 characters) is not a valid name: must be no more than 253 characters", "too long"),
    (["submit", "-f", "{file}"], job_yaml("café"), 'metadata.name "café" is not a valid name', "unicode"),
    (["submit", "-f", "{file}"], job_yaml("ok", extra=", namespace: Team"), 'metadata.namespace "Team" is not a valid namespace', "an uppercase namespace"),
    (["submit", "-n", "a.b", "-f", "{file}"], job_yaml(), 'metadata.namespace "a.b" is not a valid namespace', "-n with a dot"),
    (["submit", "-f", "{file}"], job_yaml("null", extra=", generateName: Train-"), 'metadata.generateName "Train-" is not a valid name prefix', "a bad generateName"),
    (["submit", "-f", "{file}"], job_yaml("j", extra=", labels: {kueue.x-k8s.io/queue-name: ../q}"), "kueue.x-k8s.io/queue-name", "a queue label that is a path"),
    (["apply", "-f", "{file}"], "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: lq}\nspec: {clusterQueue: ../cq}\n", 'spec.clusterQueue "../cq" is not a valid name', "a ClusterQueue reference that is a path"),
    (["delete", "workload", "/tmp/x"], None, 'name "/tmp/x" is not a valid name', "delete by a path"),
    (["delete", "workload", "ok", "-n", "Team A"], None, 'namespace "Team A" is not a valid namespace', "delete in a bad namespace"),
    (["delete", "cq", "../cq"], None, 'name "../cq" is not a valid name', "delete a config object by a path"),
    (["jobs", "launch", "-n", "My Task", "{file}"], "run: echo hi\n", 'job name "My Task" is not a valid name', "a job name with a space"),
    (["jobs", "launch", "--namespace", "Team", "{file}"], "run: echo hi\n", '--namespace "Team" is not a valid namespace', "a job in a bad namespace"),
    (["jobs", "launch", "-n", "a" * 230, "{file}"], "run: echo hi\n", "is longer than 200 characters", "no room for the attempts' suffix"),
]


@pytest.mark.parametrize(("command", "content", "message", "why"), CASES)
def test_bad_names_are_one_clear_line(
    tmp_path: Path, command: list[str], content: str | None, message: str, why: str
) -> None:
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    args = [str(path) if part == "{file}" else part for part in command]
    result = berth(*args, url=NOWHERE, check=False, timeout=20)
    assert result.returncode != 0, why
    assert message in result.stderr, (why, result.stderr)
    assert "Traceback" not in result.stderr, why
    assert len(result.stderr.strip().splitlines()) == 1, (why, result.stderr)
