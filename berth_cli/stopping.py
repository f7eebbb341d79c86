"""``berth stop`` and ``berth resume``: kueuectl's commands for a ClusterQueue, a LocalQueue
or a single workload.

What a queue's stop or resume writes (its ``spec.stopPolicy``) is one rule shared with the
web console: shared/queue_stop.py. A workload's is Kueue's ``spec.active``: the CLI names
the workload (its uid, asked of admission, so a later one of the same name is not touched)
in a ``SetWorkloadActive`` command, which admission folds (services/admission/activation.py);
a resume reactivates a workload whatever deactivated it (services/admission/deactivation.py).
"""

from __future__ import annotations

import asyncio

import click

from berth_cli.client import CliError, connect, one_workload
from shared.bus import CONFIG_BUCKET
from shared.config import KIND_PLURALS
from shared.events import SetWorkloadActive, WorkloadRef
from shared.queue_stop import QueueBusy, QueueNotFound, StopPolicy, set_stop_policy, stop_policy_for

__all__ = ["resume", "stop"]

_KINDS = {
    "clusterqueue": "ClusterQueue",
    "clusterqueues": "ClusterQueue",
    "cq": "ClusterQueue",
    "localqueue": "LocalQueue",
    "localqueues": "LocalQueue",
    "lq": "LocalQueue",
    "workload": "Workload",
    "workloads": "Workload",
    "wl": "Workload",
}
WORKLOAD_RESOURCE = "workload.kueue.x-k8s.io"


async def _set_active(url: str, name: str, namespace: str, active: bool) -> str:
    """Publish the workload's ``spec.active``; the kubectl-style line to print."""
    async with connect(url) as bus:
        workload = await one_workload(bus, name, namespace)
        resource = f"{WORKLOAD_RESOURCE}/{name}"
        conditions = {c["type"]: c for c in workload.get("status", {}).get("conditions", [])}
        if "Finished" in conditions:
            raise CliError(
                f"workload {name} in namespace {namespace} has finished: nothing to"
                f" {'resume' if active else 'stop'}"
            )
        if workload["spec"].get("active", True) == active:
            return f"{resource} unchanged (already {'active' if active else 'inactive'})"
        ref = WorkloadRef(namespace, name, workload["metadata"]["uid"])
        await bus.publish(SetWorkloadActive(source="cli", workload=ref, active=active))
    return f"{resource} {'resumed' if active else 'stopped'}"


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
        raise CliError(
            f"cannot stop a {word!r}: give clusterqueue (cq), localqueue (lq) or workload (wl)"
        )
    return kind


@click.command()
@click.argument("kind")
@click.argument("name")
@click.option(
    "-n", "--namespace", default="default", help="A LocalQueue's or workload's namespace."
)
@click.option(
    "--keep-already-running",
    is_flag=True,
    help="Admit nothing new but let admitted workloads finish (stopPolicy Hold).",
)
@click.pass_obj
def stop(nats_url: str, kind: str, name: str, namespace: str, keep_already_running: bool) -> None:
    """Stop a ClusterQueue or LocalQueue: nothing new is admitted and, unless
    --keep-already-running, its admitted workloads are evicted (stopPolicy HoldAndDrain).
    Stop a workload (KIND workload): it is evicted if admitted and not admitted again until
    resumed (Kueue's spec.active: false)."""
    resolved = _kind(kind)
    if resolved == "Workload":
        if keep_already_running:
            raise CliError(
                "--keep-already-running applies to queues; a stopped workload is evicted"
            )
        click.echo(asyncio.run(_set_active(nats_url, name, namespace, active=False)))
        return
    policy = stop_policy_for(stop=True, keep_already_running=keep_already_running)
    click.echo(asyncio.run(_set(nats_url, resolved, name, namespace, policy)))


@click.command()
@click.argument("kind")
@click.argument("name")
@click.option(
    "-n", "--namespace", default="default", help="A LocalQueue's or workload's namespace."
)
@click.pass_obj
def resume(nats_url: str, kind: str, name: str, namespace: str) -> None:
    """Resume a stopped ClusterQueue or LocalQueue (stopPolicy None), or an inactive workload
    (spec.active: true), whatever deactivated it: berth stop, its maximum execution time, a
    Rejected admission check or the pods-ready requeue limit. It is queued again at once,
    its requeue state reset."""
    resolved = _kind(kind)
    if resolved == "Workload":
        click.echo(asyncio.run(_set_active(nats_url, name, namespace, active=True)))
        return
    policy = stop_policy_for(stop=False)
    click.echo(asyncio.run(_set(nats_url, resolved, name, namespace, policy)))
