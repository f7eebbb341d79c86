"""`berth describe KIND NAME`: one object the way `kubectl describe` shows it.

A workload: its fields, its conditions as a table, and its events from the stream (Type,
Reason, Age, From, Message). A ClusterQueue: its quotas and usage per flavor and resource,
its conditions, its pending workloads in admission order and its decisions of the last
hour. A LocalQueue or a config object: its fields (and a LocalQueue's conditions).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import click

from berth_cli.client import CliError, connect, query_all
from berth_cli.events import detail, recorded
from berth_cli.get import age
from berth_cli.getting import cohort_objects, config_objects
from berth_cli.kinds import Resource, kind_words, resolve
from shared.bus import Bus
from shared.events import SUBJECT_ROOT, subject_token
from shared.queue_usage import quota_usage

__all__ = ["describe", "event_rows", "fields"]

CLUSTER_QUEUE_EVENTS_S = 3600.0  # a ClusterQueue's decisions of the last hour
SHOWN_PENDING = 20
SHOWN_QUEUE_EVENTS = 20

# Event type -> the reason kubectl shows, for events that carry none of their own.
_REASONS = {
    "WorkloadSubmitted": "Submitted",
    "WorkloadAdmitted": "QuotaReserved",
    "WorkloadStarted": "Started",
    "WorkloadEvicted": "Evicted",
    "WorkloadDeleted": "Deleted",
    "CreateWorkload": "CreateRequested",
    "DeleteWorkload": "DeleteRequested",
    "SubmitWorkload": "SubmitRequested",
    "RemoveWorkload": "RemoveRequested",
    "PriorityBoosted": "AgeingBoost",
    "JobStatusChanged": "JobStatus",
    "WorkloadPodsReady": "PodsReady",
}
_WARNINGS = {"WorkloadPending", "EvictionRequested", "WorkloadEvicted"}


_ACRONYMS = {"API", "URL", "UID", "OSB", "GUID"}  # kept upper case in a field's label


def _title(key: str) -> str:
    """``queueName`` -> ``Queue Name``, as kubectl describe prints a custom resource (its
    ``smartLabelFor``): a key with anything but letters and ``-`` is printed as it is, since
    it is a name (a label key ``kubernetes.io/metadata.name``, a resource ``nvidia.com/gpu``),
    not a field; ``API``, ``URL``, ``UID``, ``OSB`` and ``GUID`` stay upper case."""
    if not key or any(not (char.isalpha() or char == "-") for char in key):
        return key
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[^A-Za-z]+", key)
    return " ".join(
        word.upper() if word.upper() in _ACRONYMS else word[:1].upper() + word[1:]
        for word in words
    )


def fields(value: Any, indent: int = 0) -> list[str]:
    """A mapping as kubectl describe prints it: titled keys, aligned values, nested blocks
    indented by two; a list of mappings item by item."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return []
        width = max(len(_title(str(key))) for key in value) + 3  # two spaces after the colon
        lines = []
        for key, item in value.items():
            label = f"{_title(str(key))}:"
            if isinstance(item, dict | list) and item and not _flat(item):
                lines.append(f"{pad}{label}")
                lines.extend(fields(item, indent + 2))
            else:
                lines.append(f"{pad}{label.ljust(width)}{_flat_text(item)}".rstrip())
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            block = fields(item, indent + 2)
            if block:
                lines.append(f"{pad}- {block[0].lstrip()}")
                lines.extend(block[1:])
            else:
                lines.append(f"{pad}- {_flat_text(item)}")
        return lines
    return [f"{pad}{_flat_text(value)}"]


def _flat(value: dict[str, Any] | list[Any]) -> bool:
    """A list of plain values prints on one line (``Covered Resources: cpu, memory``)."""
    return isinstance(value, list) and all(not isinstance(i, dict | list) for i in value)


def _flat_text(value: Any) -> str:
    if value is None or value == {} or value == []:
        return "<none>"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _header(obj: dict[str, Any]) -> list[str]:
    metadata = obj.get("metadata", {})
    labels = metadata.get("labels") or {}
    head = {
        "Name": metadata.get("name", ""),
        "Namespace": metadata.get("namespace"),
        "Labels": "\n".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>",
        "API Version": obj.get("apiVersion", ""),
        "Kind": obj.get("kind", ""),
    }
    lines = []
    for key, value in head.items():
        if value is None:
            continue
        first, *rest = str(value).split("\n")
        lines.append(f"{key + ':':<14}{first}")
        lines.extend(" " * 14 + line for line in rest)
    return lines


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: int = 2) -> list[str]:
    """A small aligned table with kubectl describe's dashes under the headers."""
    cells = [list(headers), ["-" * len(h) for h in headers]]
    cells += [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    pad = " " * indent
    return [
        pad + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def _conditions(obj: dict[str, Any]) -> list[str]:
    conditions = obj.get("status", {}).get("conditions", [])
    rows = [
        [
            c["type"],
            c["status"],
            c.get("reason", ""),
            c.get("lastTransitionTime", ""),
            c.get("message", ""),
        ]
        for c in conditions
    ]
    headers = ["Type", "Status", "Reason", "Last Transition", "Message"]
    return ["  Conditions:", *_table(headers, rows, indent=4)]  # under Status, as kubectl


def _admission_checks(obj: dict[str, Any]) -> list[str]:
    """Kueue's status.admissionChecks as a table under Status (none: nothing)."""
    checks = obj.get("status", {}).get("admissionChecks", [])
    if not checks:
        return []
    rows = [
        [c["name"], c["state"], c.get("lastTransitionTime", ""), c.get("message", "")]
        for c in checks
    ]
    headers = ["Name", "State", "Last Transition", "Message"]
    return ["  Admission Checks:", *_table(headers, rows, indent=4)]


def event_rows(bodies: list[dict[str, Any]]) -> list[list[str]]:
    """Events as kubectl lists them: Type (Normal|Warning), Reason, Age, From, Message."""
    rows = []
    for body in bodies:
        kind = str(body.get("type", ""))
        failed = kind == "WorkloadFinished" and not body.get("succeeded")
        reason = (
            body.get("reason")
            or _REASONS.get(kind)
            or (("Failed" if failed else "Finished") if kind == "WorkloadFinished" else kind)
        )
        warning = kind in _WARNINGS or failed
        rows.append(
            [
                "Warning" if warning else "Normal",
                str(reason),
                age(str(body.get("time", ""))),
                str(body.get("source", "")),
                detail({**body, "reason": None} if body.get("reason") else body),
            ]
        )
    return rows


def _events(bodies: list[dict[str, Any]]) -> list[str]:
    if not bodies:
        return ["Events:  <none>"]
    return ["Events:", *_table(["Type", "Reason", "Age", "From", "Message"], event_rows(bodies))]


async def _one(bus: Bus, resource: str, name: str, **request: Any) -> dict[str, Any]:
    for item in await query_all(bus, resource, **request):
        if item["metadata"]["name"] == name:
            return item
    where = f' in namespace "{request["namespace"]}"' if request.get("namespace") else ""
    raise CliError(f'{resource} "{name}" not found{where}')


async def describe_workload(bus: Bus, name: str, namespace: str) -> list[str]:
    workload = await _one(bus, "workloads", name, namespace=namespace)
    tail = f"{subject_token(namespace)}.{subject_token(name)}"
    subjects = [
        f"{SUBJECT_ROOT}.wl.*.{tail}",
        f"{SUBJECT_ROOT}.cq.*.*.{tail}",
        f"{SUBJECT_ROOT}.cmd.*.{tail}",
        f"{SUBJECT_ROOT}.job.boost.{tail}",
        f"{SUBJECT_ROOT}.check.*.{tail}",  # admission checks' answers
    ]
    uid = workload["metadata"].get("uid")
    # A name may be reused: only this workload's events (a removal names no uid).
    bodies = [
        body
        for body in await recorded(bus, subjects)
        if body.get("workload", {}).get("uid") in (uid, "")
    ]
    status = dict(workload.get("status", {}))
    status.pop("conditions", None)
    status.pop("admissionChecks", None)
    lines = _header(workload)
    lines += ["Spec:", *fields(workload.get("spec", {}), 2)]
    lines += ["Status:", *fields(status, 2), *_conditions(workload), *_admission_checks(workload)]
    return [*lines, *_events(bodies)]


def _quota_rows(queue: dict[str, Any]) -> list[list[Any]]:
    """Flavor, resource, nominal quota, borrowing and lending limits, usage, borrowed."""
    return [
        [
            flavor,
            quota["name"],
            quota.get("nominalQuota", 0),
            quota.get("borrowingLimit", "-"),
            quota.get("lendingLimit", "-"),
            used.get("total", 0),
            used.get("borrowed", 0),
        ]
        for flavor, quota, used in quota_usage(queue)
    ]


def _weighted_share(status: dict[str, Any]) -> list[str]:
    """Kueue's status.fairSharing.weightedShare, when fair sharing is on."""
    fair = status.get("fairSharing")
    return [] if fair is None else [f"  Weighted Share:       {fair.get('weightedShare', 0)}"]


async def describe_cluster_queue(bus: Bus, name: str) -> list[str]:
    queue = await _one(bus, "clusterqueues", name)
    pending = await query_all(bus, "pending", clusterQueue=name)
    spec = dict(queue.get("spec", {}))
    spec.pop("resourceGroups", None)
    status = queue.get("status", {})
    lines = _header(queue)
    lines += ["Spec:", *fields(spec, 2)]
    headers = [
        "Flavor",
        "Resource",
        "Nominal",
        "Borrowing Limit",
        "Lending Limit",
        "Usage",
        "Borrowed",
    ]
    lines += ["Quotas:", *_table(headers, _quota_rows(queue))]
    lines += [
        "Status:",
        f"  Pending Workloads:    {status.get('pendingWorkloads', 0)}",
        f"  Reserving Workloads:  {status.get('reservingWorkloads', 0)}",
        f"  Admitted Workloads:   {status.get('admittedWorkloads', 0)}",
        *_weighted_share(status),
        *_conditions(queue),
    ]
    rows = [
        [
            p.get("positionInClusterQueue", ""),
            f"{p['namespace']}/{p['name']}",
            p.get("priority", 0),
            age(p.get("creationTimestamp")),
            p.get("reason", ""),
        ]
        for p in pending[:SHOWN_PENDING]
    ]
    if rows:
        lines += [
            "Pending Workloads:",
            *_table(["Position", "Workload", "Priority", "Age", "Reason"], rows),
        ]
        if len(pending) > SHOWN_PENDING:
            lines.append(
                f"  ... and {len(pending) - SHOWN_PENDING} more (berth get pending {name})"
            )
    else:
        lines.append("Pending Workloads:  <none>")
    subjects = [f"{SUBJECT_ROOT}.cq.{subject_token(name)}.>"]
    bodies = await recorded(bus, subjects, since=CLUSTER_QUEUE_EVENTS_S)
    return [*lines, *_events(bodies[-SHOWN_QUEUE_EVENTS:])]


async def describe_local_queue(bus: Bus, name: str, namespace: str) -> list[str]:
    queue = await _one(bus, "localqueues", name, namespace=namespace)
    status = dict(queue.get("status", {}))
    status.pop("conditions", None)
    lines = _header(queue)
    lines += ["Spec:", *fields(queue.get("spec", {}), 2)]
    return [*lines, "Status:", *fields(status, 2), *_conditions(queue)]


async def describe_cohort(bus: Bus, name: str) -> list[str]:
    """A Cohort as applied, then its status (Kueue's weightedShare with fair sharing on)."""
    for item in await cohort_objects(bus):
        if item["metadata"]["name"] == name:
            status = item.pop("status", {})
            rest = {k: v for k, v in item.items() if k not in ("apiVersion", "kind", "metadata")}
            share = _weighted_share(status)  # none with fair sharing off
            return [*_header(item), *fields(rest), *(["Status:", *share] if share else [])]
    raise CliError(f'cohorts "{name}" not found')


async def describe_config(bus: Bus, resource: Resource, name: str) -> list[str]:
    for item in await config_objects(bus, resource.kind):
        if item["metadata"]["name"] == name:
            rest = {k: v for k, v in item.items() if k not in ("apiVersion", "kind", "metadata")}
            return [*_header(item), *fields(rest)]
    raise CliError(f'{resource.plural} "{name}" not found')


def _complete_kind(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [word for word in kind_words() if word.startswith(incomplete)]


@click.command()
@click.argument("kind", metavar="KIND", shell_complete=_complete_kind)
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.pass_obj
def describe(nats_url: str, kind: str, name: str, namespace: str) -> None:
    """Show one object in detail: a workload's conditions and events, a ClusterQueue's quotas,
    usage, pending workloads and recent decisions; KIND as for `berth get`."""
    resource = resolve(kind)
    if resource is None:
        raise CliError(f'unknown resource type "{kind}"')

    async def render() -> list[str]:
        async with connect(nats_url) as bus:
            if resource.kind == "Workload":
                return await describe_workload(bus, name, namespace)
            if resource.kind == "ClusterQueue":
                return await describe_cluster_queue(bus, name)
            if resource.kind == "LocalQueue":
                return await describe_local_queue(bus, name, namespace)
            if resource.kind == "Cohort":
                return await describe_cohort(bus, name)
            return await describe_config(bus, resource, name)

    for line in asyncio.run(render()):
        click.echo(line)
