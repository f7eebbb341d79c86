"""`berth get`: kubectl-like tables, or the Kueue-shaped objects as JSON or YAML."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml
from rich.table import Table

from berth_cli.consoles import console_for
from shared.durations import short_age

__all__ = ["age", "print_objects", "print_table"]


def age(timestamp: str | None, *, now: datetime | None = None) -> str:
    """kubectl's short age: 45s, 5m, 3h, 2d."""
    if not timestamp:
        return ""
    return short_age(_seconds_since(timestamp, now))


def due(timestamp: str | None, *, now: datetime | None = None) -> str:
    """How far a deadline is: ``in 20s``, ``now``, or ``5m late``."""
    if not timestamp:
        return ""
    seconds = _seconds_since(timestamp, now)
    if seconds == 0:
        return "now"
    return f"{short_age(seconds)} late" if seconds > 0 else f"in {short_age(-seconds)}"


def runs_by(item: dict[str, Any], *, now: datetime | None = None) -> str:
    """A pending workload's starvation bound (docs/ageing.md): ``in 4m``, or ``-`` when it
    has none (the reason is in ``-o json`` and ``berth describe``); empty if not pending."""
    if "runsByReason" not in item:
        return ""
    return due(item.get("runsBy"), now=now) or "-"


def _seconds_since(timestamp: str, now: datetime | None) -> int:
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return int(((now or datetime.now(UTC)) - then).total_seconds())


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str) -> None:
    """A kubectl-style table: no borders, nothing truncated, no trailing blanks."""
    if not rows:
        print(empty)
        return
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console = console_for()
    with console.capture() as capture:
        console.print(table)
    print("\n".join(line.rstrip() for line in capture.get().splitlines()))


def print_objects(items: list[dict[str, Any]], output: str) -> None:
    """``-o json`` prints a v1 List (as kubectl does); ``-o yaml`` the same in YAML."""
    document = {"apiVersion": "v1", "kind": "List", "items": items}
    if output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(yaml.safe_dump(document, sort_keys=False), end="")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in obj.get("status", {}).get("conditions", []):
        if item["type"] == kind:
            return dict(item)
    return None


def checks_cell(item: dict[str, Any]) -> str:
    """A workload's admission checks and their states: ``gpu-check=Pending,quota=Ready``."""
    checks = item.get("status", {}).get("admissionChecks", [])
    return ",".join(f"{check['name']}={check['state']}" for check in checks)


def workload_rows(
    items: list[dict[str, Any]], *, wide: bool, all_namespaces: bool
) -> tuple[list[str], list[list[Any]]]:
    headers = ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    if wide:
        headers += ["PRIORITY", "EFFECTIVE", "POSITION IN CQ", "POSITION IN LQ", "RUNS BY"]
        headers += ["CHECKS", "REASON"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for item in items:
        reserved = condition(item, "QuotaReserved")
        admitted = condition(item, "Admitted")
        finished = condition(item, "Finished")
        status = item.get("status", {})
        berth = status.get("berth", {})
        row: list[Any] = [
            item["metadata"]["name"],
            item["spec"].get("queueName", ""),
            status.get("admission", {}).get("clusterQueue", "")
            if reserved and reserved["status"] == "True"
            else "",
            admitted["status"] if admitted else "",
            finished["status"] if finished else "",
            age(item["metadata"].get("creationTimestamp")),
        ]
        if wide:
            pending_reason = (
                reserved["message"] if reserved and reserved["status"] == "False" else ""
            )
            if not pending_reason and admitted and admitted["status"] == "False":
                pending_reason = admitted["message"]  # reserved, waiting for its checks
            row += [
                berth.get("basePriority", item["spec"].get("priority", 0)),
                berth.get("effectivePriority", item["spec"].get("priority", 0)),
                berth.get("positionInClusterQueue", ""),
                berth.get("positionInLocalQueue", ""),
                runs_by(berth),
                checks_cell(item),
                "" if finished else pending_reason,
            ]
        if all_namespaces:
            row.insert(0, item["metadata"]["namespace"])
        rows.append(row)
    return headers, rows


def cluster_queue_rows(
    items: list[dict[str, Any]], *, wide: bool
) -> tuple[list[str], list[list[Any]]]:
    headers = ["NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
    if wide:
        headers += ["STRATEGY", "RESERVING WORKLOADS", "ACTIVE", "WEIGHTED SHARE"]
    rows = []
    for item in items:
        spec = item.get("spec", {})
        status = item.get("status", {})
        row: list[Any] = [
            item["metadata"]["name"],
            spec.get("cohortName") or spec.get("cohort") or "",
            status.get("pendingWorkloads", 0),
            status.get("admittedWorkloads", 0),
        ]
        if wide:
            active = condition(item, "Active")
            row += [
                spec.get("queueingStrategy", "BestEffortFIFO"),
                status.get("reservingWorkloads", 0),
                active["status"] if active else "",
                # Kueue's status.fairSharing.weightedShare ("-": fair sharing is off)
                status.get("fairSharing", {}).get("weightedShare", "-"),
            ]
        rows.append(row)
    return headers, rows


def local_queue_rows(
    items: list[dict[str, Any]], *, all_namespaces: bool, wide: bool = False
) -> tuple[list[str], list[list[Any]]]:
    headers = ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
    if wide:
        headers += ["RESERVING WORKLOADS", "CONSUMED RESOURCES", "LAST UPDATE"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for item in items:
        status = item.get("status", {})
        row: list[Any] = [
            item["metadata"]["name"],
            item["spec"]["clusterQueue"],
            status.get("pendingWorkloads", 0),
            status.get("admittedWorkloads", 0),
        ]
        if wide:
            # Kueue's status.fairSharing.admissionFairSharingStatus ("-": not under
            # admission fair sharing)
            fair = status.get("fairSharing", {}).get("admissionFairSharingStatus")
            row += [
                status.get("reservingWorkloads", 0),
                "-" if fair is None else _pairs(fair.get("consumedResources")) or "<none>",
                "-" if fair is None else fair.get("lastUpdate", ""),
            ]
        if all_namespaces:
            row.insert(0, item["metadata"]["namespace"])
        rows.append(row)
    return headers, rows


def pending_rows(items: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    headers = ["POSITION", "NAMESPACE", "NAME", "LOCALQUEUE", "PRIORITY", "AGE", "REASON"]
    rows = [
        [
            item.get("positionInClusterQueue", ""),
            item["namespace"],
            item["name"],
            item.get("localQueueName", ""),
            item.get("priority", 0),
            age(item.get("creationTimestamp")),
            item.get("reason", ""),
        ]
        for item in items
    ]
    if any("dueAt" in item for item in items):  # wait targets are set
        headers.insert(-1, "DUE")
        for row, item in zip(rows, items, strict=True):
            row.insert(-1, due(item.get("dueAt")))
    headers.insert(-1, "RUNS BY")
    for row, item in zip(rows, items, strict=True):
        row.insert(-1, runs_by(item))
    return headers, rows


def _pairs(values: dict[str, Any] | None) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted((values or {}).items()))


# Config kinds read from the config bucket: kind -> (headers between NAME and AGE, cells).
CONFIG_COLUMNS: dict[str, tuple[list[str], Callable[[dict[str, Any]], list[Any]]]] = {
    "ResourceFlavor": (
        ["NODE LABELS"],
        lambda item: [_pairs(item.get("spec", {}).get("nodeLabels"))],
    ),
    "Cohort": (
        ["PARENT"],
        lambda item: [
            item.get("spec", {}).get("parentName") or item.get("spec", {}).get("parent", "")
        ],
    ),
    "WorkloadPriorityClass": (
        ["VALUE", "DESCRIPTION"],
        lambda item: [item.get("value", 0), item.get("description", "")],
    ),
    "PriorityClass": (
        ["VALUE", "GLOBAL-DEFAULT"],
        lambda item: [item.get("value", 0), str(bool(item.get("globalDefault"))).lower()],
    ),
    "Namespace": (["LABELS"], lambda item: [_pairs(item.get("metadata", {}).get("labels"))]),
    "ClusterQueuePolicy": (
        ["CLUSTERQUEUES", "MINIMUM RUN TIME", "AGEING"],
        lambda item: [
            ",".join(item.get("spec", {}).get("clusterQueues", [])) or "<all>",
            item.get("spec", {}).get("minimumRunTime") or "",
            "yes" if item.get("spec", {}).get("ageing") else "",
        ],
    ),
    "Configuration": (
        ["FAIR SHARING", "WAIT TARGETS"],
        lambda item: [
            str(item.get("spec", {}).get("fairSharing", {}).get("enable", False)).lower(),
            len(item.get("spec", {}).get("admission", {}).get("waitTargets", [])),
        ],
    ),
}


def cohort_rows(items: list[dict[str, Any]], *, wide: bool) -> tuple[list[str], list[list[Any]]]:
    """A config kind's columns; -o wide adds Kueue's status.fairSharing.weightedShare ("-":
    fair sharing is off)."""
    headers, rows = config_rows("Cohort", items)
    if wide:
        headers.append("WEIGHTED SHARE")
        for row, item in zip(rows, items, strict=True):
            row.append(item.get("status", {}).get("fairSharing", {}).get("weightedShare", "-"))
    return headers, rows


def config_rows(kind: str, items: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """NAME, the kind's own columns, AGE (since it was last applied)."""
    extra, cells = CONFIG_COLUMNS.get(kind, ([], lambda item: []))
    rows = [
        [
            item["metadata"]["name"],
            *cells(item),
            age(item["metadata"].get("creationTimestamp")),
        ]
        for item in items
    ]
    return ["NAME", *extra, "AGE"], rows
