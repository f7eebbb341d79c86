"""`berth events`: the event stream as it happens, filtered by subject on the server.

One ordered JetStream consumer (ephemeral, in memory, no acks) on the ``BERTH`` stream, from a
start point in stream time: ``--since 10m``, ``--all`` from the first event, by default the
last :data:`DEFAULT_SINCE`. The namespace, ClusterQueue and type filters become the
consumer's subject filters (docs/events.md's subject table), so where the deployment keeps
the per-workload copies the server sends only what is asked for (else the batches of those
families, whose events are matched here: shared/bus/view.py); what a subject cannot say (a
managed job's namespace, a fact's ClusterQueue) is filtered here.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import msgspec
from nats.aio.msg import Msg
from nats.js import api

from berth_cli.client import CliError, connect
from berth_cli.watching import until_stopped
from shared.bus import STREAM, Bus, BusError, bus_call
from shared.bus.batches import Shown
from shared.bus.view import ViewReading
from shared.durations import parse_duration
from shared.events import SUBJECT_ROOT, subject_token

__all__ = ["EventFilter", "detail", "events", "recorded", "render_line", "subjects_for"]

DEFAULT_SINCE = "5m"
IDLE_WAIT_S = 0.25  # how often a quiet tap looks at its stop flag

# Event type -> (subject family, verb), as docs/events.md's subject table has them.
EVENT_TYPES: dict[str, tuple[str, str]] = {
    "WorkloadSubmitted": ("wl", "submitted"),
    "WorkloadStarted": ("wl", "started"),
    "WorkloadPodsReady": ("wl", "podsready"),
    "WorkloadFinished": ("wl", "finished"),
    "WorkloadEvicted": ("wl", "evicted"),
    "WorkloadDeleted": ("wl", "deleted"),
    "WorkloadPending": ("cq", "pending"),
    "WorkloadAdmitted": ("cq", "admitted"),
    "EvictionRequested": ("cq", "evict"),
    "CreateWorkload": ("cmd", "create"),
    "DeleteWorkload": ("cmd", "delete"),
    "SubmitWorkload": ("cmd", "submit"),
    "RemoveWorkload": ("cmd", "remove"),
    "SetWorkloadActive": ("cmd", "active"),
    "PriorityBoosted": ("job", "boost"),
    "JobStatusChanged": ("job", "status"),
    # berth.check.<check>.<ns>.<name>: the check's name is where a verb would be.
    "AdmissionCheckUpdated": ("check", ""),
}
_FAMILIES = ("wl", "cq", "cmd", "job", "check")


def resolve_types(names: Sequence[str]) -> frozenset[str]:
    """Event types from what a user typed: the type (``WorkloadAdmitted``) or its subject
    verb (``admitted``), in any case."""
    by_word = {name.lower(): name for name in EVENT_TYPES}
    by_word.update({verb: name for name, (_, verb) in EVENT_TYPES.items() if verb})
    chosen = set()
    for name in names:
        found = by_word.get(name.lower())
        if found is None:
            known = ", ".join(sorted({verb for _, verb in EVENT_TYPES.values() if verb}))
            raise CliError(f"unknown event type {name!r}; use a type name or one of: {known}")
        chosen.add(found)
    return frozenset(chosen)


@dataclass(frozen=True)
class EventFilter:
    """What to show: None means any namespace / ClusterQueue; no types means every type."""

    namespace: str | None = None
    cluster_queue: str | None = None
    types: frozenset[str] = frozenset()


def subjects_for(wanted: EventFilter) -> list[str]:
    """The consumer's subject filters: every subject an event matching ``wanted`` can have.

    Namespace and ClusterQueue are subject tokens wherever the subject carries them
    (``berth.wl.<verb>.<ns>.<name>``, ``berth.cq.<cq>.<verb>.<ns>.<name>``,
    ``berth.cmd.<verb>.<ns>.<name>``, ``berth.job.boost.<ns>.<name>``); a managed job's
    status (``berth.job.status.<id>``) carries neither, so it is always asked for. No filter
    at all is ``berth.>``, which includes families this CLI does not know yet. The filters
    never overlap (the server refuses overlapping ones).
    """
    if wanted.namespace is None and wanted.cluster_queue is None and not wanted.types:
        return [f"{SUBJECT_ROOT}.>"]
    ns = "*" if wanted.namespace is None else subject_token(wanted.namespace)
    cq = "*" if wanted.cluster_queue is None else subject_token(wanted.cluster_queue)
    pairs = (
        [EVENT_TYPES[name] for name in sorted(wanted.types)]
        if wanted.types
        else [(family, "*") for family in _FAMILIES]
    )
    patterns: list[str] = []
    for family, verb in pairs:
        if family == "cq":
            patterns.append(f"{SUBJECT_ROOT}.cq.{cq}.{verb}.{ns}.*")
        elif family == "check":
            patterns.append(f"{SUBJECT_ROOT}.check.*.{ns}.*")
        elif family == "job" and verb != "boost":
            # Status subjects end in a job id: ask for them all, filter on the body.
            patterns.append(f"{SUBJECT_ROOT}.job.status.*")
            if verb == "*":
                patterns.append(f"{SUBJECT_ROOT}.job.boost.{ns}.*")
        else:
            patterns.append(f"{SUBJECT_ROOT}.{family}.{verb}.{ns}.*")
    return list(dict.fromkeys(patterns))


@dataclass
class Tap:
    """The client-side part of the filter, and what it learns on the way: the ClusterQueue
    of each workload, from its decisions (facts do not name one)."""

    wanted: EventFilter
    queue_of: dict[str, str] = field(default_factory=dict)  # workload uid -> ClusterQueue

    def keep(self, body: dict[str, Any]) -> bool:
        """Whether an event is shown: its namespace, type and ClusterQueue match; a fact or a
        managed-job event matches a ClusterQueue once a decision placed its workload there."""
        workload = body.get("workload") or {}
        uid = workload.get("uid", "")
        if "cluster_queue" in body:
            self.queue_of[uid] = body["cluster_queue"]
        wanted = self.wanted
        if wanted.namespace is not None and workload.get("namespace") != wanted.namespace:
            return False
        if wanted.types and body.get("type") not in wanted.types:
            return False
        if wanted.cluster_queue is not None:
            return self.queue_of.get(uid) == wanted.cluster_queue
        return True


HEADERS = ("TIME", "TYPE", "NAMESPACE/NAME", "CLUSTERQUEUE", "DETAIL")
# Fixed widths, as lines go out one by one; DETAIL takes the rest, a longer value pushes on.
_WIDTHS = (12, 18, 32, 16)
_WIDE_WIDTHS = (24, 18, 10, 32, 16)  # the full time, and SOURCE after TYPE


def _line(cells: Sequence[str], *, wide: bool) -> str:
    widths = _WIDE_WIDTHS if wide else _WIDTHS
    padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
    return "  ".join([*padded, *cells[len(widths) :]]).rstrip()


def header(*, wide: bool) -> str:
    cells = list(HEADERS)
    if wide:
        cells.insert(2, "SOURCE")
    return _line(cells, wide=wide)


def detail(body: dict[str, Any]) -> str:
    """The one-line why of an event: reason and message, generation, boost, job status."""
    kind = body.get("type", "")
    if kind == "WorkloadSubmitted":
        pods = ", ".join(f"{p['count']}x {p['name']}" for p in body.get("pod_sets", []))
        text = f"{body.get('kind', '')} in LocalQueue {body.get('queue_name') or 'default'}"
        priority = body.get("priority_class") or body.get("priority_class_name")
        return f"{text} ({pods})" + (f", priority class {priority}" if priority else "")
    if kind == "WorkloadAdmitted":
        flavors = sorted(
            {flavor for a in body.get("assignments", []) for flavor in a["flavors"].values()}
        )
        text = f"generation {body.get('generation')}, flavors {', '.join(flavors) or '-'}"
        if body.get("reserved_only"):  # quota reserved, waiting for its admission checks
            text += f", waiting for checks {', '.join(body.get('admission_checks', []))}"
        return text
    if kind == "AdmissionCheckUpdated":
        message = body.get("message") or ""
        text = f"check {body.get('check')} {body.get('state')}"
        return text + (f": {message}" if message else "")
    if kind == "WorkloadPodsReady" and body.get("ready") is False:  # lost (recoveryTimeout)
        return f"generation {body.get('generation')}, not ready any more"
    if kind in ("WorkloadStarted", "WorkloadPodsReady"):
        return f"generation {body.get('generation')}"
    if kind == "WorkloadFinished":
        outcome = "Succeeded" if body.get("succeeded") else "Failed"
        code = body.get("exit_code")
        message = body.get("message") or ""
        return (
            outcome
            + (f" (exit {code})" if code is not None else "")
            + (f": {message}" if message else "")
        )
    if kind == "PriorityBoosted":
        reserved = ", reserved" if body.get("reserved") else ""
        return f"ageing boost +{body.get('boost')}{reserved}"
    if kind == "JobStatusChanged":
        message = body.get("message") or ""
        text = f"job {body.get('job_id')} {body.get('status')}"
        text += f", #recoveries {body.get('recoveries')}"
        return text + (f": {message}" if message else "")
    reason = "/".join(str(body[key]) for key in ("reason", "detail") if body.get(key))
    message = str(body.get("message") or "")
    return ": ".join(part for part in (reason, message) if part)


def _time(body: dict[str, Any], *, wide: bool) -> str:
    try:
        when = datetime.fromisoformat(str(body.get("time", "")).replace("Z", "+00:00"))
    except ValueError:
        return str(body.get("time", ""))
    if wide:
        return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return when.astimezone().strftime("%H:%M:%S.%f")[:12]  # local time of day, to the ms


def render_line(body: dict[str, Any], tap: Tap, *, wide: bool) -> str:
    """One readable line: TIME TYPE NAMESPACE/NAME CLUSTERQUEUE DETAIL (wide: SOURCE too,
    and the time in full)."""
    workload = body.get("workload") or {}
    name = f"{workload.get('namespace', '')}/{workload.get('name', '')}".strip("/")
    queue = body.get("cluster_queue") or tap.queue_of.get(workload.get("uid", ""), "")
    cells = [_time(body, wide=wide), str(body.get("type", "")), name, queue, detail(body)]
    if wide:
        cells.insert(2, str(body.get("source", "")))
    return _line(cells, wide=wide)


def _body(shown: Shown) -> dict[str, Any] | None:
    """The event as a plain mapping, as the contract's decoder read it; an event type this
    CLI does not know yet (a newer Berth) still shows, as written."""
    if shown.event is not None:
        return dict(msgspec.to_builtins(shown.event))
    try:
        raw = msgspec.json.decode(shown.payload)
    except msgspec.DecodeError:
        return None
    return raw if isinstance(raw, dict) else None


async def stored_events(
    bus: Bus,
    subjects: list[str],
    *,
    since: float | None,
    follow: bool,
    stop: asyncio.Event | None = None,
) -> AsyncGenerator[Shown, None]:
    """Each stored event on ``subjects`` (its JSON, decoded) from the start point (``since`` seconds
    ago in stream time; None: the first event) to the stream's end, then on as they come with
    ``follow`` until ``stop``: one ordered consumer, deleted when done. From the per-workload
    copies where the deployment keeps them, else from the batches (shared/bus/view.py)."""
    start = None if since is None else datetime.now(UTC) - timedelta(seconds=since)
    try:
        reading = ViewReading.of(subjects, await bus.view_copies(), start)
    except BusError as error:
        raise CliError(f"cannot read the event stream: {error}") from error
    config = api.ConsumerConfig(filter_subjects=reading.filters)
    if start is None:
        config.deliver_policy = api.DeliverPolicy.ALL
    else:
        config.deliver_policy = api.DeliverPolicy.BY_START_TIME
        config.opt_start_time = start
    try:
        subscription = await bus_call(
            bus.js.subscribe(
                reading.filters[0], stream=STREAM, ordered_consumer=True, config=config
            )
        )
    except BusError as error:
        raise CliError(f"cannot follow the event stream: {error}") from error
    try:
        if not follow:
            info = await subscription.consumer_info()
            # (delivered.stream_seq is the start point's, even before any delivery)
            if info.num_pending == 0 and not (info.delivered and info.delivered.consumer_seq):
                return  # nothing from the start point on
        while stop is None or not stop.is_set():
            try:
                msg: Msg = await subscription.next_msg(timeout=IDLE_WAIT_S)
            except TimeoutError:  # nats-py's is one too
                continue
            try:
                shown = reading.events(msg)
            except msgspec.DecodeError:
                shown = []  # a malformed batch: nothing to show (the services dead-letter it)
            for item in shown:
                yield item
            if not follow and msg.metadata.num_pending == 0:
                return
    finally:
        await subscription.unsubscribe()


async def recorded(
    bus: Bus, subjects: list[str], *, since: float | None = None
) -> list[dict[str, Any]]:
    """Every stored event on ``subjects`` from the start point to the stream's end now."""
    found = []
    events = stored_events(bus, subjects, since=since, follow=False)
    async with aclosing(events):
        async for shown in events:
            body = _body(shown)
            if body is not None:
                found.append(body)
    return found


async def tap_events(
    url: str,
    wanted: EventFilter,
    *,
    since: float | None,
    follow: bool,
    output: str | None,
    stop: asyncio.Event,
) -> int:
    """Print matching events from the start point, then on as they come with ``follow``;
    returns how many were printed."""
    tap = Tap(wanted)
    printed = 0
    async with connect(url) as bus:
        subjects = subjects_for(wanted)
        # Closed here, on the open connection, whatever ends the loop (`| head`: a broken
        # pipe): left to the loop's finalizer, its unsubscribe ran after the close and failed.
        events = stored_events(bus, subjects, since=since, follow=follow, stop=stop)
        async with aclosing(events):
            async for shown in events:
                body = _body(shown)
                if body is None or not tap.keep(body):
                    continue
                if output == "json":
                    print(shown.payload.decode(), flush=True)
                else:
                    if printed == 0:
                        print(header(wide=output == "wide"), flush=True)
                    print(render_line(body, tap, wide=output == "wide"), flush=True)
                printed += 1
    return printed


def _where(wanted: EventFilter) -> str:
    parts = []
    if wanted.namespace is not None:
        parts.append(f"in {wanted.namespace} namespace")
    if wanted.cluster_queue is not None:
        parts.append(f"in ClusterQueue {wanted.cluster_queue}")
    return (" " + " ".join(parts)) if parts else ""


@click.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing events as they happen.")
@click.option("-n", "--namespace", default=None, help="Only this namespace (default: default).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace.")
@click.option("--cluster-queue", default=None, help="Only this ClusterQueue's workloads.")
@click.option(
    "--type",
    "types",
    multiple=True,
    help="Only this event type (WorkloadAdmitted, or its verb: admitted); repeatable.",
)
@click.option("-o", "--output", type=click.Choice(["json", "wide"]), default=None)
@click.option(
    "--since",
    default=None,
    help=f"Start this long ago in stream time (e.g. 30s, 10m, 2h; default {DEFAULT_SINCE}).",
)
@click.option("--all", "from_first", is_flag=True, help="Start from the first stored event.")
@click.pass_obj
def events(
    nats_url: str,
    follow: bool,
    namespace: str | None,
    all_namespaces: bool,
    cluster_queue: str | None,
    types: tuple[str, ...],
    output: str | None,
    since: str | None,
    from_first: bool,
) -> None:
    """Print Berth's events (-o json: one JSON object per line); -f follows; Ctrl-C ends.

    Filters are the stream's subject filters, so the server sends only what is shown.
    --cluster-queue shows its decisions, and the facts about a workload once a decision
    placed it there.
    """
    if since is not None and from_first:
        raise CliError("give --since or --all, not both")
    try:
        seconds = None if from_first else parse_duration(since or DEFAULT_SINCE)
    except ValueError as error:
        raise CliError(str(error)) from error
    wanted = EventFilter(
        namespace=None if all_namespaces else (namespace or "default"),
        cluster_queue=cluster_queue,
        types=resolve_types(types),
    )

    async def run() -> int:
        stop = until_stopped()  # Ctrl-C ends a follow cleanly
        return await tap_events(
            nats_url, wanted, since=seconds, follow=follow, output=output, stop=stop
        )

    try:
        printed = asyncio.run(run())
    except BrokenPipeError:  # `berth events | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    if printed == 0 and output != "json" and not follow:
        click.echo(f"No events found{_where(wanted)}.")
