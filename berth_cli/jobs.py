"""`berth jobs`: SkyPilot-style managed jobs (launch, queue, cancel, logs)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import click
import msgspec

from berth_cli import launching
from berth_cli.client import CliError, connect
from berth_cli.get import print_table
from berth_cli.ignored import warn_ignored, workload_ignored
from berth_cli.tasks import Flavor, ManagedJobSpec
from berth_cli.workload_schema import validate_option
from berth_cli.writing import check_priority_classes
from shared.bus import API_SUBJECT, CONFIG_BUCKET, JOBS_BUCKET, Bus, BusTimeout, NoResponders
from shared.durations import run_time
from shared.jobs import QUEUE_COLUMNS, TERMINAL, JobStatus, ManagedJob, load_jobs, queue_row
from shared.names import InvalidName, check_name, check_namespace, show
from shared.secrets import new_secret_name
from shared.yaml_input import YamlInputError, read_input

__all__ = ["jobs"]


async def _ask(bus: Bus, verb: str, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        reply = await bus.request(
            f"{API_SUBJECT}.recovery.{verb}", msgspec.json.encode(payload), wait=10.0
        )
    except NoResponders as error:
        raise CliError("the recovery service is not running (no responder)") from error
    except BusTimeout as error:
        raise CliError("the recovery service did not answer within 10s") from error
    body: dict[str, Any] = msgspec.json.decode(reply.data)
    if "error" in body:
        raise CliError(f"recovery: {body['error']}")
    return body


async def read_jobs(bus: Bus) -> list[ManagedJob]:
    return await load_jobs(await bus.kv(JOBS_BUCKET))


@click.group()
def jobs() -> None:
    """Managed jobs: preempted ones come back by themselves, and never starve."""


@jobs.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-n", "--name", default=None, help="Job name (default: the task's name).")
@click.option("--priority-class", default=None, help="WorkloadPriorityClass for the job.")
@click.option("--namespace", default="default", show_default=True)
@click.option("--env", "envs", multiple=True, help="KEY=VALUE, or KEY from this shell.")
@click.option("--env-file", default=None, help="A dotenv file of KEY=VALUE lines.")
@click.option("--secret", "secrets", multiple=True, help="KEY=VALUE, or KEY; never shown.")
@validate_option
@click.pass_obj
def launch(
    nats_url: str,
    file: str,
    name: str | None,
    priority_class: str | None,
    namespace: str,
    envs: tuple[str, ...],
    env_file: str | None,
    secrets: tuple[str, ...],
    validate: str,
) -> None:
    """Launch a SkyPilot task YAML, a pipeline of tasks, or a batch/v1 Job as a managed
    job; prints its ID."""
    try:
        text, source = read_input(file)
    except YamlInputError as error:
        raise CliError(str(error)) from error
    variables = {**(launching.env_file(env_file) if env_file else {})}
    variables.update(launching.assignments(envs, "--env"))
    secret_values = launching.assignments(secrets, "--secret")
    secret_name = new_secret_name()

    def parse(flavors: dict[str, list[Flavor]] | None, validate: str) -> ManagedJobSpec:
        return launching.parse_task(
            text,
            source,
            name=name,
            priority_class=priority_class,
            env=variables,
            secrets=secret_values,
            secret_name=secret_name,
            flavors=flavors,
            validate=validate,
        )

    spec = parse(None, validate)  # every error in the file before the bus is asked anything
    again = "ignore" if validate == "warn" else validate  # a warning is printed once
    _check_job_names(spec.name, namespace, source)

    async def submit() -> tuple[ManagedJobSpec, dict[str, Any]]:
        async with connect(nats_url) as bus:
            config = await bus.kv(CONFIG_BUCKET)
            chosen = parse(await launching.queue_flavors(config, namespace, text, source), again)
            launching_warnings(chosen, source)
            for task in chosen.tasks:
                probe = {
                    **task.job,
                    "metadata": {**task.job.get("metadata", {}), "namespace": namespace},
                }
                await check_priority_classes(config, probe, source)
            if chosen.secrets:
                await launching.store_secrets(bus, secret_name, chosen.secrets)
            reply = await _ask(bus, "launch", launching.launch_request(chosen, namespace))
            return chosen, reply

    spec, reply = asyncio.run(submit())
    tasks = f", {len(spec.tasks)} tasks" if len(spec.tasks) > 1 else ""
    click.echo(f"Managed job ID: {reply['id']}  ({spec.name}, {spec.resources}{tasks})")
    if reply["status"] == JobStatus.FAILED_PRECHECKS:
        raise CliError(f"job {reply['id']} FAILED_PRECHECKS: {reply['message']}")


def launching_warnings(spec: ManagedJobSpec, source: str) -> None:
    """One line on stderr per field of the file that Berth accepts and does not act on
    (the task's, and Kueue's labels and annotations on a Job given as it is)."""
    warn_ignored(source, [*spec.ignored, *(f for t in spec.tasks for f in workload_ignored(t.job))])


# Each attempt's workload is named <name>-<id>, then -r1, -r2...: room for that suffix.
MAX_JOB_NAME = 200


def _check_job_names(name: str, namespace: str, source: str) -> None:
    """The job's name and namespace are Kubernetes names (its workloads carry them)."""
    try:
        check_namespace(namespace, "--namespace")
        check_name(name, "job name")
    except InvalidName as error:
        raise CliError(f"{source}: {error} (give another with -n NAME)") from None
    if len(name) > MAX_JOB_NAME:
        raise CliError(
            f"{source}: job name {show(name)} is longer than {MAX_JOB_NAME} characters"
            " (its workloads are named <name>-<id>-r<n>); give a shorter one with -n NAME"
        )


def job_row(job: ManagedJob, now: float, *, full: bool) -> list[Any]:
    row: list[Any] = queue_row(job, now)
    if full:
        attempt = job.current
        row += [
            f"{job.namespace}/{attempt.name}" if attempt else "-",
            job.cluster_queue or "-",
            job.boost,
            "yes" if job.reserved else "",
            job.message,
        ]
    return row


@jobs.command()
@click.option("-a", "--all", "full", is_flag=True, help="Show every column.")
@click.option("-o", "--output", type=click.Choice(["json"]), default=None)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="The newest N jobs only.")
@click.pass_obj
def queue(nats_url: str, full: bool, output: str | None, limit: int | None) -> None:
    """Managed jobs with SkyPilot's columns."""

    async def fetch() -> list[ManagedJob]:
        async with connect(nats_url) as bus:
            return await read_jobs(bus)

    found = sorted(asyncio.run(fetch()), key=lambda j: -j.id)[:limit]
    if output == "json":
        click.echo(json.dumps([msgspec.to_builtins(job) for job in found], indent=2))
        return
    active = [job for job in found if job.status not in TERMINAL]
    if active:
        counts: dict[str, int] = {}
        for job in active:
            counts[job.status.value] = counts.get(job.status.value, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        click.echo(f"In progress tasks: {summary}")
    else:
        click.echo("No in-progress managed jobs.")
    headers = list(QUEUE_COLUMNS)
    if full:
        headers += ["WORKLOAD", "CLUSTERQUEUE", "BOOST", "RESERVED", "MESSAGE"]
    now = time.time()
    rows = []
    for job in sorted(found, key=lambda j: -j.id):
        rows.append(job_row(job, now, full=full))
        rows += task_rows(job, now, full=full)
    print_table(headers, rows, empty="No managed jobs.")


def task_rows(job: ManagedJob, now: float, *, full: bool) -> list[list[Any]]:
    """A pipeline's tasks under its row, as SkyPilot shows them: ``↳ <index>: <name>``,
    each task's resources, time running and own status."""
    rows: list[list[Any]] = []
    for index, task in enumerate(job.tasks):
        ran = "-"
        if task.started_at is not None:
            ran = run_time((task.ended_at or now) - task.started_at)
        row: list[Any] = [
            "",
            f"↳ {index}: {task.name}",
            task.resources,
            "",
            "",
            ran,
            "",
            task.status,
        ]
        rows.append([*row, "", "", "", "", ""] if full else row)
    return rows


@jobs.command()
@click.argument("job_id", required=False, type=int)
@click.option("-n", "--name", default=None, help="Cancel the job(s) with this name.")
@click.pass_obj
def cancel(nats_url: str, job_id: int | None, name: str | None) -> None:
    """Cancel a managed job by ID or name."""
    if (job_id is None) == (name is None):
        raise CliError("give a job ID or -n NAME")

    async def ask() -> dict[str, Any]:
        async with connect(nats_url) as bus:
            return await _ask(bus, "cancel", {"id": job_id, "name": name})

    reply = asyncio.run(ask())
    click.echo(f"Cancelling managed job(s): {', '.join(str(i) for i in reply['cancelled'])}")


@jobs.command()
@click.argument("job_id", required=False, type=int)
@click.option("-n", "--name", default=None, help="The newest job with this name.")
@click.option("--follow/--no-follow", default=False, help="Keep printing until the job ends.")
@click.pass_obj
def logs(nats_url: str, job_id: int | None, name: str | None, follow: bool) -> None:
    """The job's output across all its attempts and recoveries, each run after the first
    under a separator line (``--- run N of ATTEMPT ---``)."""
    if (job_id is None) == (name is None):
        raise CliError("give a job ID or -n NAME")

    async def stream() -> None:
        async with connect(nats_url) as bus:
            offsets: dict[str, dict[str, int]] = {}
            shown: list[tuple[str, str]] = []  # (attempt, run) printed last
            while True:
                job = _pick(await read_jobs(bus), job_id, name)
                for attempt in job.attempts:
                    await _print_new_output(bus, job.namespace, attempt.name, offsets, shown)
                if not follow or job.done:
                    return
                await asyncio.sleep(0.5)

    asyncio.run(stream())


def _pick(found: list[ManagedJob], job_id: int | None, name: str | None) -> ManagedJob:
    """The job by ID, or the newest with ``name``."""
    matches = [j for j in found if (j.id == job_id if job_id is not None else j.name == name)]
    if not matches:
        raise CliError(f"no managed job {job_id if job_id is not None else repr(name)}")
    return max(matches, key=lambda j: j.id)


async def _print_new_output(
    bus: Bus,
    namespace: str,
    name: str,
    offsets: dict[str, dict[str, int]],
    shown: list[tuple[str, str]],
) -> None:
    known = offsets.setdefault(name, {})
    payload = msgspec.json.encode({"namespace": namespace, "name": name, "offsets": known})
    try:
        reply = await bus.request(f"{API_SUBJECT}.watcher.logs", payload, wait=5.0)
    except (NoResponders, BusTimeout) as error:
        raise CliError("the watcher did not answer for logs") from error
    body = msgspec.json.decode(reply.data)
    if "error" in body:
        raise CliError(f"watcher: {body['error']}")
    for item in body["files"]:
        if item["data"]:
            # Files are "<admission generation>-<pod>.log": a new generation is a new run.
            run = (name, str(item["file"]).split("-", 1)[0])
            if shown and shown[-1] != run:
                sys.stdout.write(f"--- run {run[1]} of {name} ---\n")
            if not shown or shown[-1] != run:
                shown.append(run)
            sys.stdout.write(item["data"])
            sys.stdout.flush()
        known[item["file"]] = item["offset"]
