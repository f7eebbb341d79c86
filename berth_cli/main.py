"""The `berth` command: a client of the bus like any other tool, plus `berth up`."""

from __future__ import annotations

import asyncio
import json
import os
from importlib.metadata import version as package_version
from pathlib import Path

import click

from berth_cli.admissionchecks import admissioncheck
from berth_cli.applying import apply, submit
from berth_cli.client import CliError
from berth_cli.creds import creds
from berth_cli.describe import describe
from berth_cli.events import events
from berth_cli.getting import get
from berth_cli.jobs import jobs
from berth_cli.kinds import WORKLOAD_OBJECT_WORDS, resolve
from berth_cli.status import status
from berth_cli.stopping import resume, stop
from berth_cli.writing import delete_config, delete_workload
from shared.bus import DEFAULT_NATS_URL
from shared.events import event_json_schema
from shared.logging import configure_logging

__all__ = ["cli"]

VERSION = package_version("berth")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="berth", message="%(prog)s %(version)s")
@click.option(
    "--nats-url",
    envvar="BERTH_NATS_URL",
    default=DEFAULT_NATS_URL,
    show_default=True,
    help="Where Berth's NATS listens (env BERTH_NATS_URL).",
)
@click.pass_context
def cli(context: click.Context, nats_url: str) -> None:
    """Berth: Kueue's quotas and preemption, SkyPilot's self-healing jobs, no starvation."""
    configure_logging(service="cli", level="error")  # JSON on stderr, only real failures
    context.obj = nats_url


@cli.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=lambda: os.environ.get("BERTH_DATA_DIR", str(Path.home() / ".berth")),
    show_default="$BERTH_DATA_DIR or ~/.berth",
    help="Where NATS stores events and workloads write their logs; one `berth up` at a time.",
)
@click.option("--nats-port", type=int, default=4222, show_default=True, help="0 picks a free port.")
@click.option(
    "--replicas",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="Processes of each service (BERTH_REPLICA_ID=<role>-<i>).",
)
@click.option(
    "--nats-cluster",
    type=click.Choice(["1", "3"]),
    default="1",
    show_default=True,
    help="NATS servers: more than one form a JetStream cluster (streams kept on each).",
)
def up(data_dir: Path, nats_port: int, replicas: int, nats_cluster: str) -> None:
    """Start NATS and the four services on this machine; Ctrl-C stops them all."""
    from berth_cli.up import run_up

    raise SystemExit(
        run_up(
            data_dir=data_dir.absolute(),
            nats_port=nats_port,
            replicas=replicas,
            nats_cluster=int(nats_cluster),
        )
    )


@cli.command()
@click.argument("kind", metavar="KIND")
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.pass_obj
def delete(nats_url: str, kind: str, name: str, namespace: str) -> None:
    """Delete a workload (its processes stop, its quota is released) or a config object.

    KIND is workload, clusterqueue (cq), localqueue (lq), resourceflavor (rf),
    workloadpriorityclass (wpc), priorityclass (pc), cohort, namespace, clusterqueuepolicy or
    configuration.
    """
    resource = resolve(kind)
    if kind.lower() in WORKLOAD_OBJECT_WORDS or (resource and resource.kind == "Workload"):
        click.echo(asyncio.run(delete_workload(nats_url, name, namespace)))
        return
    if resource is None:
        raise CliError(f"unknown kind {kind!r} to delete")
    click.echo(asyncio.run(delete_config(nats_url, resource.kind, name, namespace)))


cli.add_command(apply)
cli.add_command(admissioncheck)
cli.add_command(submit)
cli.add_command(get)
cli.add_command(describe)
cli.add_command(jobs)
cli.add_command(status)
cli.add_command(events)
cli.add_command(creds)
cli.add_command(stop)
cli.add_command(resume)


@cli.command()
def schema() -> None:
    """Print the JSON Schema of every event Berth publishes."""
    click.echo(json.dumps(event_json_schema(), indent=2))


@cli.command("version")
def show_version() -> None:
    """Print Berth's version (from the package metadata; --version too)."""
    click.echo(f"berth {VERSION}")


__all__ += ["CliError"]
