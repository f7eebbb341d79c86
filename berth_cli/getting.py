"""`berth get KIND [NAME]`: kubectl's habits over Berth's two sources of truth.

Workloads and queues come from admission's status API (what it decides with, with status);
every other config kind (resourceflavors, cohorts, workloadpriorityclasses...) from the
config bucket, as `berth apply` stored it. Kinds answer to any of their words (``wl``,
``cq``, ``lq``, ``rf``, ``wpc``...: berth_cli/kinds.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import click
import msgspec
import yaml

from berth_cli import get as get_output
from berth_cli.client import CliError, connect, key_exists, query_all
from berth_cli.kinds import RESOURCES, Resource, by_plural, resolve
from berth_cli.watching import Snapshot, watch
from shared.bus import CONFIG_BUCKET, BucketWatch, Bus, live_value
from shared.config import config_key, config_key_prefix
from shared.durations import kube_timestamp

__all__ = ["cohort_objects", "config_objects", "get"]

OUTPUTS = click.Choice(["wide", "json", "yaml"])
Rows = tuple[list[str], list[list[Any]]]


class KindGroup(click.Group):
    """A group whose commands are kinds, found by any of their words (``cq``, ``wl``...)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None:
            resource = resolve(cmd_name)
            if resource is not None:
                command = super().get_command(ctx, resource.plural)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            known = ", ".join(sorted(self.list_commands(ctx)))
            raise CliError(f'unknown resource type "{args[0]}"; Berth has: {known}')
        return super().resolve_command(ctx, args)


@click.group(cls=KindGroup)
def get() -> None:
    """Show workloads, queues, config objects, or a ClusterQueue's pending workloads.

    KIND may be any of its names: workloads (wl), clusterqueues (cq), localqueues (lq),
    resourceflavors (rf), workloadpriorityclasses (wpc), priorityclasses (pc), cohorts,
    namespaces (ns), clusterqueuepolicies (cqp), configurations; then an optional NAME.
    -w polls every second and prints each row again when it changes.
    """


def _namespace_filter(namespace: str | None, all_namespaces: bool) -> str | None:
    return None if all_namespaces else (namespace or "default")


async def config_objects(bus: Bus, kind: str) -> list[dict[str, Any]]:
    """The stored objects of a config kind, as applied; ``creationTimestamp`` is when the
    stored version was written (the bucket keeps no earlier one)."""
    entries = await BucketWatch.snapshot(await bus.kv(CONFIG_BUCKET))
    prefix = config_key_prefix(kind)
    items = []
    for entry in entries:
        value = live_value(entry)
        if value is None or not entry.key.startswith(prefix):
            continue
        stored: dict[str, Any] = msgspec.json.decode(value)
        # kubectl's order: apiVersion, kind, metadata, then the rest
        body = {"apiVersion": stored.pop("apiVersion", ""), "kind": stored.pop("kind", kind)}
        body.update(stored)
        written: Any = entry.created
        if isinstance(written, datetime):
            body.setdefault("metadata", {})["creationTimestamp"] = kube_timestamp(written)
        items.append(body)
    return sorted(
        items, key=lambda item: (item["metadata"].get("namespace", ""), item["metadata"]["name"])
    )


@dataclass(frozen=True)
class Listing:
    """One `get`: where its objects come from, how they become a table, and what to say
    when there are none."""

    resource: Resource
    fetch: Callable[[Bus], Awaitable[list[dict[str, Any]]]]
    tabulate: Callable[[list[dict[str, Any]]], Rows]
    empty: str
    where: str = ""  # " in namespace ..." for a NAME not found


def _key(item: dict[str, Any]) -> tuple[str | None, str | None]:
    """(namespace, name) of a Kueue-shaped object, or of a pending-list item."""
    metadata = item.get("metadata", item)
    return (metadata.get("namespace"), metadata.get("name"))


def _named(items: list[dict[str, Any]], name: str | None) -> list[dict[str, Any]]:
    return [item for item in items if name is None or _key(item)[1] == name]


def show(
    nats_url: str, listing: Listing, *, output: str | None, name: str | None, watching: bool
) -> None:
    """Print the objects (-o json|yaml; one object itself when NAME is given, as kubectl
    does) or a table; a NAME that matches nothing is an error; -w keeps polling."""

    async def fetch(bus: Bus) -> list[dict[str, Any]]:
        return _named(await listing.fetch(bus), name)

    if watching:

        async def follow() -> None:
            async with connect(nats_url) as bus:

                async def poll() -> Snapshot:
                    items = await fetch(bus)
                    headers, rows = listing.tabulate(items)
                    return headers, [
                        (_key(item), row, item) for item, row in zip(items, rows, strict=True)
                    ]

                await watch(poll, output=output, empty=listing.empty)

        asyncio.run(follow())
        return

    async def once() -> list[dict[str, Any]]:
        async with connect(nats_url) as bus:
            return await fetch(bus)

    items = asyncio.run(once())
    if name is not None and not items:
        raise CliError(f'{listing.resource.plural} "{name}" not found{listing.where}')
    if output in ("json", "yaml") and name is not None and len(items) == 1:
        if output == "json":
            print(json.dumps(items[0], indent=2))
        else:
            print(yaml.safe_dump(items[0], sort_keys=False), end="")
        return
    if output in ("json", "yaml"):
        get_output.print_objects(items, output)
        return
    headers, rows = listing.tabulate(items)
    get_output.print_table(headers, rows, empty=listing.empty)


def _status(resource: str, **request: Any) -> Callable[[Bus], Awaitable[list[dict[str, Any]]]]:
    async def fetch(bus: Bus) -> list[dict[str, Any]]:
        return await query_all(bus, resource, **request)

    return fetch


F = TypeVar("F", bound=Callable[..., Any])

_name = click.argument("name", required=False)


def _namespaced(command: F) -> F:
    """``-n NS`` and ``-A``, as kubectl spells them, for a namespaced kind."""
    command = click.option("-A", "--all-namespaces", is_flag=True)(command)
    return click.option("-n", "--namespace", default=None)(command)


_watch = click.option(
    "-w", "--watch", "watching", is_flag=True, help="Poll every second; print rows that change."
)
_output = click.option("-o", "--output", type=OUTPUTS, default=None)


def _namespaced_status(
    plural: str, rows: Callable[..., Rows], empty: Callable[[str | None], str], help: str
) -> click.Command:
    """`get <plural>` for a namespaced kind admission serves with its status: the objects of
    ``-n NS`` (``default`` when not given) or, with ``-A``, of every namespace; ``empty`` is
    what to say when there are none in the namespace asked for (None: any namespace)."""

    @click.command(plural, help=help)
    @_name
    @_namespaced
    @_output
    @_watch
    @click.pass_obj
    def command(
        nats_url: str,
        name: str | None,
        namespace: str | None,
        all_namespaces: bool,
        output: str | None,
        watching: bool,
    ) -> None:
        wanted = _namespace_filter(namespace, all_namespaces)
        listing = Listing(
            by_plural(plural),
            _status(plural, namespace=wanted),
            lambda items: rows(items, wide=output == "wide", all_namespaces=all_namespaces),
            empty=empty(wanted),
            where="" if all_namespaces else f' in namespace "{wanted}"',
        )
        show(nats_url, listing, output=output, name=name, watching=watching)

    return command


def _no_workloads(wanted: str | None) -> str:
    where = "in any namespace" if wanted is None else f"in {wanted} namespace"
    return f"No workloads found {where}."


get.add_command(
    _namespaced_status(
        "workloads",
        get_output.workload_rows,
        _no_workloads,
        help="Workloads, with Kueue's columns (NAME, QUEUE, RESERVED IN, ADMITTED, FINISHED, AGE).",
    )
)


@get.command("clusterqueues")
@_name
@_output
@_watch
@click.pass_obj
def get_cluster_queues(nats_url: str, name: str | None, output: str | None, watching: bool) -> None:
    """ClusterQueues with their status (NAME, COHORT, PENDING WORKLOADS, ADMITTED WORKLOADS)."""
    listing = Listing(
        by_plural("clusterqueues"),
        _status("clusterqueues"),
        lambda items: get_output.cluster_queue_rows(items, wide=output == "wide"),
        empty="No clusterqueues found.",
    )
    show(nats_url, listing, output=output, name=name, watching=watching)


get.add_command(
    _namespaced_status(
        "localqueues",
        get_output.local_queue_rows,
        lambda _: "No localqueues found.",
        help="LocalQueues with their status.",
    )
)


@get.command("pending")
@click.argument("cluster_queue")
@click.option("-o", "--output", type=click.Choice(["json", "yaml"]), default=None)
@click.pass_obj
def get_pending(nats_url: str, cluster_queue: str, output: str | None) -> None:
    """A ClusterQueue's pending workloads in admission order (Kueue's visibility API)."""

    async def fetch(bus: Bus) -> list[dict[str, Any]]:
        # As kueuectl's visibility API: an unknown ClusterQueue is not found, not empty.
        config = await bus.kv(CONFIG_BUCKET)
        if not await key_exists(config, config_key("ClusterQueue", cluster_queue)):
            raise CliError(f'clusterqueues "{cluster_queue}" not found')
        return await query_all(bus, "pending", clusterQueue=cluster_queue)

    listing = Listing(
        by_plural("clusterqueues"),
        fetch,
        get_output.pending_rows,
        empty=f"No pending workloads in {cluster_queue}.",
    )
    show(nats_url, listing, output=output, name=None, watching=False)


async def cohort_objects(bus: Bus) -> list[dict[str, Any]]:
    """The Cohorts `berth apply` stored, each with the status admission gives it (Kueue's
    ``status.fairSharing.weightedShare``, with fair sharing on)."""
    items = await config_objects(bus, "Cohort")
    statuses = {c["metadata"]["name"]: c.get("status", {}) for c in await query_all(bus, "cohorts")}
    for item in items:
        item["status"] = statuses.get(item["metadata"]["name"], {})
    return items


@get.command("cohorts")
@_name
@_output
@_watch
@click.pass_obj
def get_cohorts(nats_url: str, name: str | None, output: str | None, watching: bool) -> None:
    """The cohorts `berth apply` stored, with their status (NAME, PARENT, AGE; -o wide adds
    WEIGHTED SHARE)."""
    listing = Listing(
        by_plural("cohorts"),
        cohort_objects,
        lambda items: get_output.cohort_rows(items, wide=output == "wide"),
        empty="No cohorts found.",
    )
    show(nats_url, listing, output=output, name=name, watching=watching)


def _config_command(resource: Resource) -> click.Command:
    """`get <plural>` for a kind read from the config bucket."""

    @click.command(resource.plural, help=f"The {resource.plural} `berth apply` stored.")
    @_name
    @_output
    @_watch
    @click.pass_obj
    def command(nats_url: str, name: str | None, output: str | None, watching: bool) -> None:
        async def fetch(bus: Bus) -> list[dict[str, Any]]:
            return await config_objects(bus, resource.kind)

        listing = Listing(
            resource,
            fetch,
            lambda items: get_output.config_rows(resource.kind, items),
            empty=f"No {resource.plural} found.",
        )
        show(nats_url, listing, output=output, name=name, watching=watching)

    return command


for _resource in RESOURCES:
    if _resource.config and _resource.plural not in get.commands:
        get.add_command(_config_command(_resource))
