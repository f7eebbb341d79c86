"""`berth apply` and `berth submit`: files or directories (``-R``), and ``--dry-run``.

Everything named is read and validated before anything is written, so one bad document in
a directory applies nothing. ``--dry-run`` writes nothing: ``apply`` prints one line per
object (``created (dry run)``, ``configured (dry run)`` or ``unchanged``) and, under each
configured one, a unified diff of the stored object against the new one (YAML);
``submit`` checks the objects, their queue and priority class and their names, and prints
``created (dry run)``.
"""

from __future__ import annotations

import asyncio
import difflib
from pathlib import Path
from typing import Any

import click
import msgspec
import yaml

from berth_cli.client import CliError, connect
from berth_cli.ignored import config_ignored, warn_ignored, warn_skipped, workload_ignored
from berth_cli.workload_schema import validate_option
from berth_cli.writing import (
    apply_config,
    check_references,
    parse_config,
    prepare_workloads,
    read_documents,
    submit_workloads,
    workload_exists,
)
from shared.bus import CONFIG_BUCKET, KeyNotFound
from shared.config import KIND_PLURALS, encode_object, object_key
from shared.workloads import resource_name

__all__ = ["apply", "config_diff", "input_files", "submit"]

SUFFIXES = (".yaml", ".yml", ".json")


def input_files(filename: str, *, recursive: bool) -> list[str]:
    """What ``-f`` names, as kubectl reads it: ``-`` (stdin) or a file as given; a directory
    is its files ending .yaml, .yml or .json in name order, and with ``-R`` those of its
    subdirectories too (a path's parts sorted, so a tree reads the same everywhere)."""
    if filename == "-":
        return ["-"]
    path = Path(filename)
    if not path.is_dir():
        return [filename]
    found = path.rglob("*") if recursive else path.iterdir()
    files = sorted(
        (p for p in found if p.is_file() and p.suffix in SUFFIXES), key=lambda p: p.parts
    )
    if not files:
        raise CliError(f"{filename}: no .yaml, .yml or .json files")
    return [str(p) for p in files]


def read_all(filename: str, *, recursive: bool) -> list[tuple[list[dict[str, Any]], str]]:
    """Every file's documents and its name for messages."""
    return [read_documents(name) for name in input_files(filename, recursive=recursive)]


def config_diff(resource: str, before: bytes, after: bytes) -> list[str]:
    """The stored object against the new one, as a unified diff of their YAML."""

    def lines(value: bytes) -> list[str]:
        text = yaml.safe_dump(msgspec.json.decode(value), sort_keys=True)
        return text.splitlines(keepends=True)

    diff = difflib.unified_diff(
        lines(before), lines(after), fromfile=f"stored/{resource}", tofile=f"applied/{resource}"
    )
    return [line.rstrip("\n") for line in diff]


async def _dry_run_apply(url: str, files: list[tuple[list[dict[str, Any]], str]]) -> list[str]:
    lines = []
    async with connect(url) as bus:
        kv = await bus.kv(CONFIG_BUCKET)
        for documents, source in files:
            for obj in parse_config(documents, source):
                value = encode_object(obj)
                try:
                    before = (await kv.get(object_key(obj))).value
                except KeyNotFound:
                    before = None
                resource = f"{KIND_PLURALS[type(obj).__name__]}/{obj.metadata.name}"
                if before == value:
                    lines.append(f"{resource} unchanged")
                elif before is None:
                    lines.append(f"{resource} created (dry run)")
                else:
                    lines.append(f"{resource} configured (dry run)")
                    lines.extend(config_diff(resource, before, value))
    return lines


async def _check_workloads(
    url: str,
    files: list[tuple[list[dict[str, Any]], str]],
    namespace: str | None,
    *,
    names: bool,
    validate: str,
) -> list[str]:
    """Validate every workload of every file (and its pod group), its LocalQueue and
    priority class, and with ``names`` that its name is free, as `berth submit` checks them;
    the lines a dry run prints."""
    prepared = prepare_workloads(files, namespace=namespace, validate=validate)
    lines = []
    async with connect(url) as bus:
        config = await bus.kv(CONFIG_BUCKET)
        seen: set[tuple[str, str]] = set()
        for obj, where in prepared:
            await check_references(config, obj, where)
            metadata = obj["metadata"]
            lines.append(f"{resource_name(obj['kind'])}/{metadata['name']} created (dry run)")
            identity = (metadata["namespace"], metadata["name"])
            if names and (identity in seen or await workload_exists(bus, *identity)):
                raise CliError(
                    f"{where}: workload {identity[1]!r} already exists in namespace {identity[0]!r}"
                )
            seen.add(identity)
    return lines


_filename = click.option(
    "-f", "--filename", required=True, help="A file, a directory (.yaml/.yml/.json), or -."
)
_recursive = click.option(
    "-R", "--recursive", is_flag=True, help="With a directory: its subdirectories too."
)
_dry_run = click.option("--dry-run", is_flag=True, help="Validate and show; write nothing.")


@click.command()
@_filename
@_recursive
@_dry_run
@click.pass_obj
def apply(nats_url: str, filename: str, recursive: bool, dry_run: bool) -> None:
    """Create or update ResourceFlavors, ClusterQueues, LocalQueues, priority classes...

    --dry-run prints what would change, and the diff of each configured object. What
    `berth get -o yaml` prints applies back unchanged: a List is read as its items, and
    status and what a server sets in metadata (creationTimestamp, uid...) are ignored.
    """
    files = read_all(filename, recursive=recursive)
    for documents, source in files:
        parse_config(documents, source)  # every file checked before anything is written
    for documents, source in files:
        warn_skipped(source, documents)
        warn_ignored(source, [f for document in documents for f in config_ignored(document)])
    if dry_run:
        lines = asyncio.run(_dry_run_apply(nats_url, files))
    else:

        async def write() -> list[str]:
            done = []
            for documents, source in files:
                done += await apply_config(nats_url, documents, source)
            return done

        lines = asyncio.run(write())
    for line in lines:
        click.echo(line)


@click.command()
@_filename
@_recursive
@click.option(
    "-n", "--namespace", default=None, help="Namespace (default: the object's, else default)."
)
@_dry_run
@validate_option
@click.pass_obj
def submit(
    nats_url: str,
    filename: str,
    recursive: bool,
    namespace: str | None,
    dry_run: bool,
    validate: str,
) -> None:
    """Submit workloads (Jobs, Pods and pod groups, JobSets, Kubeflow jobs, Ray, AppWrappers,
    LeaderWorkerSets, Deployments, StatefulSets); they queue in the LocalQueue their label
    names."""
    files = read_all(filename, recursive=recursive)
    for documents, source in files:
        warn_ignored(source, [f for document in documents for f in workload_ignored(document)])
    if dry_run:
        lines = asyncio.run(
            _check_workloads(nats_url, files, namespace, names=True, validate=validate)
        )
    else:

        async def write() -> list[str]:
            if len(files) > 1:  # every file checked before the first is submitted
                # (a warning is printed once, as each file is submitted)
                checking = "ignore" if validate == "warn" else validate
                await _check_workloads(nats_url, files, namespace, names=False, validate=checking)
            done = []
            for documents, source in files:
                done += await submit_workloads(
                    nats_url, documents, source, namespace=namespace, validate=validate
                )
            return done

        lines = asyncio.run(write())
    for line in lines:
        click.echo(line)
