"""The `berth` command: a client of the bus like any other tool, plus `berth up`."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from berth_cli import get as get_output
from berth_cli.client import CliError, connect, query_all
from berth_cli.events import events
from berth_cli.jobs import jobs
from berth_cli.status import status
from berth_cli.writing import (
    CONFIG_NAMES,
    apply_config,
    delete_config,
    delete_workload,
    read_documents,
    submit_workloads,
)
from shared.bus import DEFAULT_NATS_URL
from shared.events import event_json_schema
from shared.logging import configure_logging

__all__ = ["cli"]

OUTPUTS = click.Choice(["wide", "json", "yaml"])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    help="Where NATS stores events and workloads write their logs.",
)
@click.option("--nats-port", type=int, default=4222, show_default=True, help="0 picks a free port.")
def up(data_dir: Path, nats_port: int) -> None:
    """Start NATS and the four services on this machine; Ctrl-C stops them all."""
    from berth_cli.up import run_up

    raise SystemExit(run_up(data_dir=data_dir.absolute(), nats_port=nats_port))


@cli.command()
@click.option(
    "-f", "--filename", required=True, help="YAML file with Kueue objects, or - for stdin."
)
@click.pass_obj
def apply(nats_url: str, filename: str) -> None:
    """Create or update ResourceFlavors, ClusterQueues, LocalQueues, priority classes..."""
    documents, source = read_documents(filename)
    for line in asyncio.run(apply_config(nats_url, documents, source)):
        click.echo(line)


@cli.command()
@click.option(
    "-f", "--filename", required=True, help="YAML with batch/v1 Jobs, v1 Pods or RayJobs."
)
@click.option(
    "-n", "--namespace", default=None, help="Namespace (default: the object's, else default)."
)
@click.pass_obj
def submit(nats_url: str, filename: str, namespace: str | None) -> None:
    """Submit workloads; they queue in the LocalQueue their label names."""
    documents, source = read_documents(filename)
    for line in asyncio.run(submit_workloads(nats_url, documents, source, namespace=namespace)):
        click.echo(line)


@cli.group()
def get() -> None:
    """Show workloads, queues, or a ClusterQueue's pending workloads."""


def _namespace_filter(namespace: str | None, all_namespaces: bool) -> str | None:
    return None if all_namespaces else (namespace or "default")


def _show(
    nats_url: str,
    resource: str,
    output: str | None,
    tabulate: Callable[[list[dict[str, Any]]], tuple[list[str], list[list[Any]]]],
    *,
    empty: str,
    **request: Any,
) -> None:
    """Ask admission for a resource; print the objects (-o json|yaml) or a table."""

    async def fetch() -> list[dict[str, Any]]:
        async with connect(nats_url) as bus:
            return await query_all(bus, resource, **request)

    items = asyncio.run(fetch())
    if output in ("json", "yaml"):
        get_output.print_objects(items, output)
        return
    headers, rows = tabulate(items)
    get_output.print_table(headers, rows, empty=empty)


@get.command("workloads")
@click.option("-n", "--namespace", default=None)
@click.option("-A", "--all-namespaces", is_flag=True)
@click.option("-o", "--output", type=OUTPUTS, default=None)
@click.pass_obj
def get_workloads(
    nats_url: str, namespace: str | None, all_namespaces: bool, output: str | None
) -> None:
    """Workloads, with Kueue's columns (NAME, QUEUE, RESERVED IN, ADMITTED, FINISHED, AGE)."""
    wanted = _namespace_filter(namespace, all_namespaces)
    where = "in any namespace" if all_namespaces else f"in {wanted} namespace"
    _show(
        nats_url,
        "workloads",
        output,
        lambda items: get_output.workload_rows(
            items, wide=output == "wide", all_namespaces=all_namespaces
        ),
        empty=f"No workloads found {where}.",
        namespace=wanted,
    )


@get.command("clusterqueues")
@click.option("-o", "--output", type=OUTPUTS, default=None)
@click.pass_obj
def get_cluster_queues(nats_url: str, output: str | None) -> None:
    """ClusterQueues with their status (NAME, COHORT, PENDING WORKLOADS, ADMITTED WORKLOADS)."""
    _show(
        nats_url,
        "clusterqueues",
        output,
        lambda items: get_output.cluster_queue_rows(items, wide=output == "wide"),
        empty="No clusterqueues found.",
    )


@get.command("localqueues")
@click.option("-n", "--namespace", default=None)
@click.option("-A", "--all-namespaces", is_flag=True)
@click.option("-o", "--output", type=OUTPUTS, default=None)
@click.pass_obj
def get_local_queues(
    nats_url: str, namespace: str | None, all_namespaces: bool, output: str | None
) -> None:
    """LocalQueues with their status."""
    _show(
        nats_url,
        "localqueues",
        output,
        lambda items: get_output.local_queue_rows(items, all_namespaces=all_namespaces),
        empty="No localqueues found.",
        namespace=_namespace_filter(namespace, all_namespaces),
    )


@get.command("pending")
@click.argument("cluster_queue")
@click.option("-o", "--output", type=click.Choice(["json", "yaml"]), default=None)
@click.pass_obj
def get_pending(nats_url: str, cluster_queue: str, output: str | None) -> None:
    """A ClusterQueue's pending workloads in admission order (Kueue's visibility API)."""
    _show(
        nats_url,
        "pending",
        output,
        get_output.pending_rows,
        empty=f"No pending workloads in {cluster_queue}.",
        clusterQueue=cluster_queue,
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
    word = kind.lower()
    if word in ("workload", "workloads", "wl", "job", "jobs", "pod", "pods", "rayjob", "rayjobs"):
        click.echo(asyncio.run(delete_workload(nats_url, name, namespace)))
        return
    if word not in CONFIG_NAMES:
        raise CliError(f"unknown kind {kind!r} to delete")
    click.echo(asyncio.run(delete_config(nats_url, CONFIG_NAMES[word], name, namespace)))


cli.add_command(jobs)
cli.add_command(status)
cli.add_command(events)


@cli.command()
def schema() -> None:
    """Print the JSON Schema of every event Berth publishes."""
    click.echo(json.dumps(event_json_schema(), indent=2))


__all__ += ["CliError"]
