"""``berth stop`` and ``berth resume``: kueuectl's commands for a ClusterQueue or LocalQueue.

Admission already honours ``spec.stopPolicy`` (docs/kueue-fields.md), so stopping is a patch
of the stored object: ``HoldAndDrain`` (nothing new is admitted and what runs is evicted), or
``Hold`` with ``--keep-already-running`` (what runs finishes); resuming sets ``None``. The
write is conditional on the revision read, so a concurrent ``berth apply`` is never lost.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import click
import msgspec
import nats.js.errors

from berth_cli.client import CliError, connect
from shared.bus import CONFIG_BUCKET
from shared.config import (
    KIND_PLURALS,
    ClusterQueue,
    LocalQueue,
    decode_object,
    encode_object,
)

__all__ = ["resume", "stop"]

StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
_KINDS = {
    "clusterqueue": "ClusterQueue",
    "clusterqueues": "ClusterQueue",
    "cq": "ClusterQueue",
    "localqueue": "LocalQueue",
    "localqueues": "LocalQueue",
    "lq": "LocalQueue",
}


async def set_stop_policy(
    url: str, kind: str, name: str, namespace: str, policy: StopPolicy
) -> str:
    """Write ``policy`` into the stored queue; the kubectl-style line to print."""
    key = f"{kind.lower()}.{namespace if kind == 'LocalQueue' else '_'}.{name}"
    where = f"{kind} {name}" + (f" in namespace {namespace}" if kind == "LocalQueue" else "")
    async with connect(url) as bus:
        kv = await bus.kv(CONFIG_BUCKET)
        for _ in range(5):  # a concurrent write: read again and decide again
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                raise CliError(f"{where} not found") from None
            if entry.value is None:
                raise CliError(f"{where} not found")
            obj = decode_object(entry.value)
            assert isinstance(obj, ClusterQueue | LocalQueue)
            resource = f"{KIND_PLURALS[kind]}/{name}"
            if obj.spec.stop_policy == policy:
                return f"{resource} unchanged (stopPolicy {policy})"
            spec = msgspec.structs.replace(obj.spec, stop_policy=policy)
            value = encode_object(msgspec.structs.replace(obj, spec=spec))
            try:
                await kv.update(key, value, last=entry.revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
            return f"{resource} {'resumed' if policy == 'None' else 'stopped'}"
    raise CliError(f"{where} kept changing; try again")


def _kind(word: str) -> str:
    kind = _KINDS.get(word.lower())
    if kind is None:
        raise CliError(f"cannot stop a {word!r}: give clusterqueue (cq) or localqueue (lq)")
    return kind


@click.command()
@click.argument("kind")
@click.argument("name")
@click.option("-n", "--namespace", default="default", help="A LocalQueue's namespace.")
@click.option(
    "--keep-already-running",
    is_flag=True,
    help="Admit nothing new but let admitted workloads finish (stopPolicy Hold).",
)
@click.pass_obj
def stop(nats_url: str, kind: str, name: str, namespace: str, keep_already_running: bool) -> None:
    """Stop a ClusterQueue or LocalQueue: nothing new is admitted and, unless
    --keep-already-running, its admitted workloads are evicted (stopPolicy HoldAndDrain)."""
    policy: StopPolicy = "Hold" if keep_already_running else "HoldAndDrain"
    click.echo(asyncio.run(set_stop_policy(nats_url, _kind(kind), name, namespace, policy)))


@click.command()
@click.argument("kind")
@click.argument("name")
@click.option("-n", "--namespace", default="default", help="A LocalQueue's namespace.")
@click.pass_obj
def resume(nats_url: str, kind: str, name: str, namespace: str) -> None:
    """Resume a stopped ClusterQueue or LocalQueue (stopPolicy None)."""
    click.echo(asyncio.run(set_stop_policy(nats_url, _kind(kind), name, namespace, "None")))
