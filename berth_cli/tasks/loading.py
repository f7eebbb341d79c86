"""``berth jobs launch FILE``: the file read as SkyPilot reads it, into a managed job.

The file is a SkyPilot task, a pipeline (several task documents, run in order as one
managed job; a first document holding only ``name`` names the pipeline, as in SkyPilot's
``load_chain_dag_from_yaml``), or a batch/v1 Job, which passes through. Fields SkyPilot
accepts but Berth cannot honour are accepted and listed in :attr:`ManagedJobSpec.ignored`
for the CLI to warn about; unknown fields are errors. Every :class:`TaskError` is one line
naming the source and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from berth_cli.tasks.building import Overrides, TaskSpec, from_job, from_task, queue_of
from berth_cli.tasks.choosing import Flavor
from berth_cli.tasks.fields import Fail, TaskError, check_label_value, stem
from shared.yaml_input import YamlInputError, load_all

__all__ = ["ManagedJobSpec", "load_managed_job", "queues_named"]

# A pipeline header with these is a SkyPilot job group (tasks side by side), not a chain.
_JOB_GROUP_FIELDS = ("execution", "placement")


@dataclass(frozen=True)
class ManagedJobSpec:
    """What ``berth jobs launch`` submits: its tasks (one, or a pipeline's in order)."""

    name: str  # -n NAME, else the pipeline's or task's `name` (a Job's name), else the file's
    tasks: tuple[TaskSpec, ...]
    ignored: tuple[str, ...] = field(default=())  # accepted fields Berth does not honour
    secrets: dict[str, str] = field(default_factory=dict)  # to store, never to show

    @property
    def job(self) -> dict[str, Any]:
        return self.tasks[0].job

    @property
    def resources(self) -> str:
        return self.tasks[0].resources

    @property
    def max_restarts_on_errors(self) -> int:
        return self.tasks[0].max_restarts_on_errors

    @property
    def queue_name(self) -> str:
        return self.tasks[0].queue_name

    @property
    def priority_class(self) -> str:
        return self.tasks[0].priority_class

    @property
    def priority_class_name(self) -> str:
        return self.tasks[0].priority_class_name


def queues_named(text: str, *, source: str) -> set[str]:
    """The LocalQueues a file's tasks name (``""``: the namespace's default), to look up
    their ClusterQueues before choosing among candidates."""
    try:
        documents = _load_yaml(text, source)
    except TaskError:
        return set()
    return {queue_of(doc) for doc in documents if "kind" not in doc}


def load_managed_job(
    text: str,
    *,
    source: str,
    name: str | None = None,
    priority_class: str | None = None,
    env: dict[str, str] | None = None,
    secrets: dict[str, str] | None = None,
    secret_name: str = "berth-secret",
    base_dir: Path | None = None,
    flavors: dict[str, list[Flavor]] | None = None,
    validate: str = "strict",
) -> ManagedJobSpec:
    """Parse a task, a pipeline or a batch/v1 Job; raises :class:`TaskError` naming the field.

    ``name`` (``-n``) overrides the task's name; ``priority_class`` (``--priority-class``)
    sets the ``kueue.x-k8s.io/priority-class`` label, overriding the file's; ``env`` and
    ``secrets`` (``--env``/``--env-file``, ``--secret``) go to every task; ``flavors`` (by
    queue name) let the choice among candidates ask the ClusterQueue (:mod:`.choosing`);
    ``validate`` (``--validate``) is how a batch/v1 Job's unknown fields are met.
    """
    documents = _load_yaml(text, source)
    try:
        if priority_class is not None:
            check_label_value(priority_class, "--priority-class")
        if name is not None and not name.strip():
            raise Fail("--name", "must not be empty")
        if len(documents) == 1 and "kind" in documents[0]:
            if env or secrets:
                raise Fail(
                    "--env", "--env and --secret set a SkyPilot task's variables, not a Job's"
                )
            metadata = documents[0].get("metadata")
            job_name = metadata.get("name") if isinstance(metadata, dict) else None
            default = job_name if isinstance(job_name, str) and job_name else stem(source)
            passed = from_job(documents[0], source, name or default, priority_class, validate)
            return ManagedJobSpec(name=passed.name, tasks=(passed,))
        pipeline_name, tasks = _pipeline(documents)
        overrides = Overrides(
            env=dict(env or {}),
            secrets=dict(secrets or {}),
            secret_name=secret_name,
            base_dir=base_dir or Path.cwd(),
            priority_class=priority_class,
            flavors=flavors,
        )
        ignored: list[str] = []
        built: list[TaskSpec] = []
        stored: dict[str, str] = {}
        for index, (prefix, task) in enumerate(tasks):
            task_name = task.get("name")
            if task_name is not None and not isinstance(task_name, str):
                raise Fail(f"{prefix}name", f"must be a string, got {task_name!r}")
            default = task_name or (stem(source) if len(tasks) == 1 else f"task-{index}")
            try:
                spec, values = from_task(task, source, default, overrides, ignored)
            except Fail as failure:
                raise Fail(prefix + failure.path, failure.message) from None
            built.append(spec)
            stored.update(values)
        job_name = name or pipeline_name or built[0].name
        return ManagedJobSpec(
            name=job_name,
            tasks=tuple(built),
            ignored=tuple(dict.fromkeys(ignored)),
            secrets=stored,
        )
    except Fail as failure:
        path = failure.path if failure.path.isprintable() else repr(failure.path)  # one line
        raise TaskError(f"{source}: `{path}`: {failure.message}") from None


def _pipeline(
    documents: list[dict[str, Any]],
) -> tuple[str | None, list[tuple[str, dict[str, Any]]]]:
    """(the pipeline's name, its tasks with the prefix their errors carry)."""
    if len(documents) == 1:
        return None, [("", documents[0])]
    header = documents[0]
    for key in _JOB_GROUP_FIELDS:
        if key in header:
            raise Fail(key, "SkyPilot job groups (tasks run side by side) are not supported")
    name: str | None = None
    if set(header) == {"name"}:
        if not isinstance(header["name"], str):
            raise Fail("name", f"must be a string, got {header['name']!r}")
        name, documents = header["name"], documents[1:]
    tasks = []
    for index, document in enumerate(documents):
        prefix = f"task {index}: " if len(documents) > 1 else ""
        if "kind" in document:
            raise Fail(f"{prefix}kind", "a pipeline's documents are SkyPilot tasks, not objects")
        tasks.append((prefix, document))
    return name, tasks


def _load_yaml(text: str, source: str) -> list[dict[str, Any]]:
    try:
        documents = [doc for doc in load_all(text, source=source) if doc is not None]
    except YamlInputError as error:
        raise TaskError(str(error)) from None
    if not documents:
        raise TaskError(f"{source}: empty file: expected a SkyPilot task or a batch/v1 Job")
    for document in documents:
        if not isinstance(document, dict):
            raise TaskError(
                f"{source}: expected a mapping (a SkyPilot task or a batch/v1 Job),"
                f" got {type(document).__name__}"
            )
        for key in document:
            if not isinstance(key, str):
                raise TaskError(f"{source}: `{key!r}`: field names must be strings")
    if len(documents) > 1 and any("kind" in doc for doc in documents):
        raise TaskError(
            f"{source}: {len(documents)} YAML documents with a Kubernetes object among them:"
            " a file holds one Job, or a SkyPilot task or pipeline"
        )
    return documents
