"""`berth admissioncheck set`: answer an admission check for a workload, as a check's
controller would (docs/admission-checks.md). The answer is an ``AdmissionCheckUpdated``
event on ``berth.check.<check>.<namespace>.<name>``; admission folds it and decides."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from berth_cli.client import CliError, connect, one_workload
from shared.admission_checks import CHECK_STATES
from shared.events import AdmissionCheckUpdated, WorkloadRef
from shared.names import InvalidName, check_name, check_namespace

__all__ = ["admissioncheck", "answer_check", "waiting_checks"]


def waiting_checks(item: dict[str, Any]) -> tuple[int, dict[str, str]] | None:
    """The reservation a rendered Workload waits with (its generation) and its checks'
    states, or None when it holds no reservation waiting for checks."""
    berth = item.get("status", {}).get("berth", {})
    generation = berth.get("reservationGeneration")
    if generation is None:
        return None
    states = {c["name"]: c["state"] for c in item["status"].get("admissionChecks", [])}
    return int(generation), states


async def answer_check(
    url: str,
    *,
    name: str,
    namespace: str,
    check: str,
    state: str,
    message: str,
    requeue_after: int | None,
) -> str:
    """Publish the answer once the workload is known to wait for ``check``; a clear error
    otherwise (no such workload, no reservation waiting, not one of its checks)."""
    try:
        check_name(name, "WORKLOAD")
        check_namespace(namespace, "--namespace")
        check_name(check, "CHECK")
    except InvalidName as error:
        raise CliError(str(error)) from None
    if requeue_after is not None and state != "Retry":
        raise CliError("--requeue-after goes with Retry only")
    async with connect(url) as bus:
        item = await one_workload(bus, name, namespace)
        waiting = waiting_checks(item)
        if waiting is None:
            raise CliError(
                f'workload "{name}" holds no quota reservation waiting for admission checks'
            )
        generation, states = waiting
        if check not in states:
            raise CliError(
                f'workload "{name}" does not wait for admission check "{check}"'
                f" (its checks: {', '.join(sorted(states))})"
            )
        ref = WorkloadRef(namespace, name, item["metadata"]["uid"])
        await bus.publish(
            AdmissionCheckUpdated(
                source="cli",
                workload=ref,
                check=check,
                state=state,  # type: ignore[arg-type]  # one of CHECK_STATES (click)
                message=message,
                generation=generation,
                requeue_after_seconds=requeue_after,
            )
        )
    return f'admission check "{check}" of workload "{name}" set to {state}'


@click.group()
def admissioncheck() -> None:
    """Answer Kueue admission checks (as a check's controller would)."""


@admissioncheck.command("set")
@click.argument("workload")
@click.argument("check")
@click.argument("state", type=click.Choice(CHECK_STATES))
@click.option("--message", default="", help="Why; shown in the workload's status.")
@click.option(
    "--requeue-after",
    type=click.IntRange(0),
    default=None,
    help="With Retry: seconds before the workload queues again (Kueue's requeueAfterSeconds).",
)
@click.option("-n", "--namespace", default="default", show_default=True)
@click.pass_obj
def set_check(
    nats_url: str,
    workload: str,
    check: str,
    state: str,
    message: str,
    requeue_after: int | None,
    namespace: str,
) -> None:
    """Set CHECK of WORKLOAD's quota reservation to Ready, Retry, Rejected or Pending.

    Ready on every check admits and starts it; Retry releases its quota and requeues it
    after a backoff; Rejected deactivates it.
    """
    click.echo(
        asyncio.run(
            answer_check(
                nats_url,
                name=workload,
                namespace=namespace,
                check=check,
                state=state,
                message=message,
                requeue_after=requeue_after,
            )
        )
    )
