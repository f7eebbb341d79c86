"""A workload's unknown fields are refused as kubectl's strict field validation refuses them
(berth_cli.workload_schema.check_known_fields), before anything reads what a typo hid, and
`berth submit` says so in one line: table-driven, with the reason per case."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth_cli.client import CliError
from berth_cli.tasks import TaskError, load_managed_job
from berth_cli.workload_schema import check_known_fields
from berth_cli.writing import prepare_workloads
from shared.workload_fields import WorkloadError
from shared.workload_kinds import KINDS
from tests.conftest import REPO, berth

EXAMPLES = REPO / "examples" / "kinds"

Document = dict[str, Any]


def example(name: str, index: int = 0) -> Document:
    """Document ``index`` of examples/kinds/<name>.yaml, a fresh copy."""
    documents = list(yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()))
    return copy.deepcopy(documents[index])


def changed(name: str, change: Callable[[Document], object]) -> Document:
    """An example with ``change`` made to it."""
    document = example(name)
    change(document)
    return document


def job_container(job: Document) -> Document:
    return job["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def ray_worker(ray_job: Document) -> Document:
    group = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    return group["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def jobset_pod(job_set: Document) -> Document:
    job = job_set["spec"]["replicatedJobs"][0]["template"]
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def two_containers(*, pull: str) -> Document:
    """The Pod example with a second container setting its pull policy under ``pull``."""
    pod = example("pod")
    second = {"name": "side", "image": "busybox", pull: "IfNotPresent"}
    pod["spec"]["containers"].append(second)
    return pod


def wrapped_pod(pod_field: str) -> Document:
    """An AppWrapper of one whole Pod (a component found by its podSets path ``template``)."""
    pod = example("pod")
    pod["spec"][pod_field] = "Never"
    wrapper = example("appwrapper")
    wrapper["spec"]["components"] = [
        {"template": pod, "podSets": [{"path": "template", "replicas": 1}]}
    ]
    return wrapper


_JOB_REQUESTS = "spec.template.spec.containers[0].resources"
_RAY_WORKER = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0]"
_JOBSET_POD = "spec.replicatedJobs[0].template.spec.template.spec"

# (reason, document, the error or None)
CASES: list[tuple[str, Any, str | None]] = [
    (
        "the walkthrough's Job: a typo of `requests` held no quota and was admitted at once",
        changed("job", lambda j: job_container(j).update(resources={"requets": {"cpu": "64"}})),
        f'unknown field "{_JOB_REQUESTS}.requets"',
    ),
    (
        "a typo of `labels` lost the queue label",
        changed("job", lambda j: j["metadata"].update(lables=j["metadata"].pop("labels"))),
        'unknown field "metadata.lables"',
    ),
    (
        "a typo of `containers` is named, not reported as a pod of no containers",
        changed(
            "job",
            lambda j: j["spec"]["template"]["spec"].update(
                containres=j["spec"]["template"]["spec"].pop("containers")
            ),
        ),
        'unknown field "spec.template.spec.containres"',
    ),
    (
        "every unknown field is named, in document order, on one line",
        changed(
            "job",
            lambda j: (
                j["metadata"].update(lables={}),
                job_container(j)["resources"].update(requets={}),
            ),
        ),
        f'unknown field "metadata.lables", unknown field "{_JOB_REQUESTS}.requets"',
    ),
    (
        "a second container's fields are checked as the first's: a known one passes",
        two_containers(pull="imagePullPolicy"),
        None,
    ),
    (
        "a second container's misspelled field is named with its index",
        two_containers(pull="imagePulPolicy"),
        'unknown field "spec.containers[1].imagePulPolicy"',
    ),
    (
        "a RayJob (a custom resource) has its pod templates checked",
        changed("rayjob", lambda r: ray_worker(r).update(imagePulPolicy="Always")),
        f'unknown field "{_RAY_WORKER}.imagePulPolicy"',
    ),
    (
        "a JobSet's pod templates, inside its Jobs' templates, are checked",
        changed("jobset", lambda s: jobset_pod(s).update(restartPolicyy="Never")),
        f'unknown field "{_JOBSET_POD}.restartPolicyy"',
    ),
    (
        "a custom resource's metadata is checked against ObjectMeta",
        changed("rayjob", lambda r: r["metadata"].update(lables={})),
        'unknown field "metadata.lables"',
    ),
    (
        "the limit: the rest of a custom resource has no model, and is not checked",
        changed("jobset", lambda s: s["spec"]["replicatedJobs"][0].update(replicaz=2)),
        None,
    ),
    (
        "an AppWrapper component that is a whole Pod is checked as a Pod: apiVersion passes",
        wrapped_pod("restartPolicy"),
        None,
    ),
    (
        "an AppWrapper component that is a whole Pod: its typo is named at its place",
        wrapped_pod("restartPolicyy"),
        'unknown field "spec.components[0].template.spec.restartPolicyy"',
    ),
    (
        "a Deployment is checked whole, its pod template too",
        changed("deployment", lambda d: job_container(d).update(portz=[])),
        'unknown field "spec.template.spec.containers[0].portz"',
    ),
    (
        "a StatefulSet is checked whole, its own spec too",
        changed("statefulset", lambda s: s["spec"].update(serviceNam="x")),
        'unknown field "spec.serviceNam"',
    ),
    (
        "free-form maps: label, annotation and nodeSelector keys, and resource names in"
        " requests and limits, are not field names",
        changed(
            "job",
            lambda j: (
                j["metadata"]["labels"].update({"example.com/any-key": "v"}),
                j["metadata"].update(annotations={"berth.dev/anything": "x"}),
                j["spec"]["template"]["spec"].update(nodeSelector={"kubernetes.io/arch": "amd64"}),
                job_container(j)["resources"].update(
                    requests={"cpu": "1", "nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}
                ),
            ),
        ),
        None,
    ),
    (
        "an int-or-string (type object) may be a mapping's value of any shape",
        changed(
            "deployment",
            lambda d: d["spec"].update(
                strategy={"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}
            ),
        ),
        None,
    ),
    (
        "status is not checked: Berth drops it, as an API server ignores it at a create",
        changed("job", lambda j: j.update(status={"anything": 1})),
        None,
    ),
    (
        "a value of the wrong type is left to the readers (workload_spec refuses it)",
        changed("job", lambda j: j["spec"]["template"].update(spec=["not", "a", "mapping"])),
        None,
    ),
    (
        "a kind Berth does not queue is left to workload_spec, which names it",
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}, "bogus": 1},
        None,
    ),
    ("not a mapping: left to workload_spec", ["a", "list"], None),
]

# Every example of every kind Berth queues is accepted whole (a multi-document file, each).
EXAMPLE_CASES: list[tuple[str, Any, str | None]] = [
    (f"examples/kinds/{path.name} document {index + 1} is valid", document, None)
    for path in sorted(EXAMPLES.glob("*.yaml"))
    for index, document in enumerate(yaml.safe_load_all(path.read_text()))
]


ALL = CASES + EXAMPLE_CASES


@pytest.mark.parametrize(("reason", "document", "error"), ALL, ids=[c[0] for c in ALL])
def test_unknown_fields(reason: str, document: Any, error: str | None) -> None:
    if error is None:
        check_known_fields(document)
        return
    with pytest.raises(WorkloadError) as caught:
        check_known_fields(document)
    assert str(caught.value) == error, reason


def test_every_kind_berth_queues_has_an_example() -> None:
    """The examples cover every submittable kind, so the table above accepts each one."""
    kinds = {document["kind"] for _, document, _ in EXAMPLE_CASES}
    assert kinds == {name for name, kind in KINDS.items() if kind.submittable}


def test_submit_names_the_typo_before_what_it_hid() -> None:
    """`berth submit` checks the fields first: the missing containers of a typo'd
    `containers` would otherwise be the error, and the typo never named."""
    job = changed(
        "job",
        lambda j: j["spec"]["template"]["spec"].update(
            containres=j["spec"]["template"]["spec"].pop("containers")
        ),
    )
    with pytest.raises(CliError) as caught:
        prepare_workloads([([job], "job.yaml")], namespace=None)
    assert str(caught.value) == (
        'job.yaml: document 1: unknown field "spec.template.spec.containres"'
    )


@pytest.mark.parametrize("dry_run", [["--dry-run"], []], ids=["dry run", "submit"])
def test_the_cli_refuses_a_typo_in_one_line(tmp_path: Path, dry_run: list[str]) -> None:
    """The walkthrough's file: exit 1, the field named, nothing contacted (no Berth is
    listening: the check comes before any connection, so nothing can be submitted)."""
    path = tmp_path / "job.yaml"
    job = changed("job", lambda j: job_container(j).update(resources={"requets": {"cpu": "64"}}))
    path.write_text(yaml.safe_dump(job))
    result = berth("submit", *dry_run, "-f", str(path), url="nats://127.0.0.1:1", check=False)
    assert result.returncode == 1, result.stderr
    expected = f'{path}: document 1: unknown field "{_JOB_REQUESTS}.requets"'
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and "cannot reach NATS" not in result.stderr


def test_a_job_launched_as_a_managed_job_is_checked_too() -> None:
    """`berth jobs launch job.yaml` takes a batch/v1 Job as given: a typo there must not
    drop its requests either (a Job Berth builds from a task is its own, not checked)."""
    job = changed("job", lambda j: job_container(j).update(resources={"requets": {"cpu": "64"}}))
    with pytest.raises(TaskError) as caught:
        load_managed_job(yaml.safe_dump(job), source="job.yaml")
    assert f'job.yaml: unknown field "{_JOB_REQUESTS}.requets"' in str(caught.value)
    # `berth jobs launch --validate=ignore`: a field this schema does not know is let through
    loaded = load_managed_job(yaml.safe_dump(job), source="job.yaml", validate="ignore")
    assert loaded.name == "job"


# (--validate, whether it is refused, whether a warning is printed, why): kubectl's modes
VALIDATE_CASES = [
    ("strict", True, False, "the default: refused, nothing sent"),
    ("true", True, False, "kubectl's old spelling of strict"),
    ("warn", False, True, "a field a newer cluster knows: said, and submitted"),
    ("ignore", False, False, "not looked at"),
    ("false", False, False, "kubectl's old spelling of ignore"),
]


@pytest.mark.parametrize(
    ("validate", "refused", "warned", "why"), VALIDATE_CASES, ids=[c[3] for c in VALIDATE_CASES]
)
def test_validate_is_kubectls(
    tmp_path: Path, validate: str, refused: bool, warned: bool, why: str
) -> None:
    """`berth submit --validate=...`: past the check, it goes on to the bus (none listens
    here: "cannot reach NATS" shows it got that far)."""
    path = tmp_path / "job.yaml"
    job = changed("job", lambda j: job_container(j).update(resources={"requets": {"cpu": "64"}}))
    path.write_text(yaml.safe_dump(job))
    result = berth(
        "submit", f"--validate={validate}", "-f", str(path), url="nats://127.0.0.1:1", check=False
    )
    assert result.returncode == 1, why
    field = f'unknown field "{_JOB_REQUESTS}.requets"'
    assert (f"Error: {path}: document 1: {field}" in result.stderr) == refused, why
    assert (f"berth: warning: {path}: document 1: {field}" in result.stderr) == warned, why
    assert ("cannot reach NATS" in result.stderr) == (not refused), why
