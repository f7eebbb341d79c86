"""``berth stop`` and ``berth resume``: kueuectl's commands for a ClusterQueue or LocalQueue.

What a stop or resume writes (the queue's ``spec.stopPolicy``) is one rule shared with the
web console: shared/queue_stop.py.
"""

from __future__ import annotations

import asyncio

import click

from berth_cli.client import CliError, connect
from shared.bus import CONFIG_BUCKET
from shared.config import KIND_PLURALS
from shared.queue_stop import QueueBusy, QueueNotFound, StopPolicy, set_stop_policy, stop_policy_for

__all__ = ["resume", "stop"]

_KINDS = {
    "clusterqueue": "ClusterQueue",
    "clusterqueues": "ClusterQueue",
    "cq": "ClusterQueue",
    "localqueue": "LocalQueue",
    "localqueues": "LocalQueue",
    "lq": "LocalQueue",
}


async def _set(url: str, kind: str, name: str, namespace: str, policy: StopPolicy) -> str:
    """Write ``policy`` into the stored queue; the kubectl-style line to print."""
    async with connect(url) as bus:
        kv = await bus.kv(CONFIG_BUCKET)
        try:
            outcome = await set_stop_policy(kv, kind, name, namespace, policy)
        except (QueueNotFound, QueueBusy) as error:
            raise CliError(str(error)) from None
    resource = f"{KIND_PLURALS[kind]}/{name}"
    if not outcome.changed:
        return f"{resource} unchanged (stopPolicy {policy})"
    return f"{resource} {outcome.verb}"


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
    policy = stop_policy_for(stop=True, keep_already_running=keep_already_running)
    click.echo(asyncio.run(_set(nats_url, _kind(kind), name, namespace, policy)))


@click.command()
@click.argument("kind")
@click.argument("name")
@click.option("-n", "--namespace", default="default", help="A LocalQueue's namespace.")
@click.pass_obj
def resume(nats_url: str, kind: str, name: str, namespace: str) -> None:
    """Resume a stopped ClusterQueue or LocalQueue (stopPolicy None)."""
    policy = stop_policy_for(stop=False)
    click.echo(asyncio.run(_set(nats_url, _kind(kind), name, namespace, policy)))
