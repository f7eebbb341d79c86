"""One workload: what the console knows of it, its timeline of events, and its logs.

The timeline is read from the event stream by the workload's subjects when the page opens
(``Queries.history``), then grows from the console's one shared consumer; logs come from the
watcher's ``berth.api.watcher.logs``, followed from the offsets already shown.
"""

from __future__ import annotations

import time

from berth_console.describe import describe, kind_of
from berth_console.markup import Markup, join, render
from berth_console.model import Recent
from berth_console.pages.base import Addition, Context, Snapshot, View, badge, link, path_part
from berth_console.queries import QueryError
from berth_console.timefmt import short_age, time_tag
from berth_console.workloads import WorkloadRow
from shared.events import AnyEvent, subject_token
from shared.subjects import subject_matcher

__all__ = ["WorkloadView", "log_chunk", "timeline_item"]


def timeline_item(event: AnyEvent) -> Markup:
    label, kind = kind_of(event)
    return render(
        '<li>$time<span class="kind $kind">$label</span><span>$text</span></li>',
        time=time_tag(event.time),
        kind=kind,
        label=label,
        text=describe(event),
    )


def log_chunk(file: str, data: str, *, first: bool) -> Markup:
    header = f"── {file} ──\n" if first else ""
    return render("<span>$text</span>", text=header + data)


class WorkloadView(View):
    nav = "workloads"
    topics = ("workloads", "events")
    poll_s = 1.0  # new log output arrives without an event

    def __init__(self, context: Context, namespace: str, name: str) -> None:
        super().__init__(context)
        self.namespace = namespace
        self.name = name
        self.title = f"Workload {namespace}/{name}"
        tail = f"{subject_token(namespace)}.{subject_token(name)}"
        self._ours = subject_matcher([f"berth.*.*.{tail}", f"berth.cq.*.*.{tail}"])
        self._seq = 0  # the last stream sequence shown in the timeline
        # Ids of the events read by history: the shared consumer folds a batch at its own
        # sequence, after its copies' (which history may have read), so an event can come
        # both ways with two sequences; its id keeps it once.
        self._from_history: set[str] = set()
        self._started = False
        self._offsets: dict[str, int] = {}
        self._headed: set[str] = set()  # log files whose name was shown
        self._logs_final = False

    def _keep(self, item: Recent) -> bool:
        return self._ours(item.subject)

    async def snapshot(self) -> Snapshot:
        row = self.model.workloads.rows.get((self.namespace, self.name))
        regions = {"facts": self._facts(row)}
        additions: list[Addition] = []
        if not self._started or self.model.missed_since(self._seq):
            regions["timeline"] = await self._history()
        else:
            additions += [Addition("timeline", timeline_item(item.event)) for item in self._newer()]
        logs = await self._logs(row)
        if not self._started:
            regions["logs"] = logs or render('<span class="muted">No output (yet).</span>')
        elif logs:
            additions.append(Addition("logs", logs))
        self._started = True
        return Snapshot(regions=regions, additions=additions)

    def _newer(self) -> list[Recent]:
        items = list(self.model.recent_after(self._seq, self._keep))
        if items:
            self._seq = items[-1].seq
        return [item for item in items if item.event.id not in self._from_history]

    async def _history(self) -> Markup:
        """The whole timeline: from the stream by subject, then what the shared consumer
        has folded since (an event can be in both: the sequence, or its id, keeps it once)."""
        lines: list[Markup] = []
        queries = self.context.queries
        self._from_history.clear()
        if queries is not None:
            try:
                for seq, _, event in await queries.history(self.namespace, self.name):
                    lines.append(timeline_item(event))
                    self._seq = max(self._seq, seq)
                    self._from_history.add(event.id)
            except QueryError as error:
                lines.append(render('<li class="notice error">$why</li>', why=str(error)))
        lines += [timeline_item(item.event) for item in self._newer()]
        return join(lines) or render('<li class="empty muted">No events about it.</li>')

    async def _logs(self, row: WorkloadRow | None) -> Markup:
        queries = self.context.queries
        if queries is None or self._logs_final:
            return Markup("")
        # Once finished (or gone), one last read picks up the end of the output.
        self._logs_final = row is None or row.done
        try:
            files = await queries.logs(self.namespace, self.name, self._offsets)
        except QueryError as error:
            return (
                render('<span class="muted">[$why]</span>\n', why=str(error))
                if not self._started
                else Markup("")
            )
        chunks = []
        for item in files:
            if item["data"]:
                chunks.append(
                    log_chunk(item["file"], item["data"], first=item["file"] not in self._headed)
                )
                self._headed.add(item["file"])
        return join(chunks)

    def _facts(self, row: WorkloadRow | None) -> Markup:
        if row is None:
            return render(
                "<dt>Status</dt><dd>$state</dd>",
                state="not known: deleted, or not submitted yet"
                if self.model.caught_up
                else "reading the event stream…",
            )
        job = self.model.job_of_workload(row.namespace, row.name)
        facts: list[tuple[str, object]] = [
            ("Status", badge(row.status)),
            ("Kind", row.kind),
            ("LocalQueue", row.local_queue),
            (
                "ClusterQueue",
                link(f"/cq/{path_part(row.cluster_queue)}", row.cluster_queue)
                if row.cluster_queue
                else "",
            ),
            (
                "Priority",
                f"{row.priority} (ageing boost +{row.boost})" if row.boost else row.priority,
            ),
            ("Flavors", row.flavors or "none while pending"),
            ("Runs (admissions)", row.generation),
            ("Evictions", row.evictions),
            ("Age", short_age(time.time() - row.created.timestamp())),
        ]
        if row.preempted_by:
            facts.append(("Last preempted by", row.preempted_by))
        if row.reason:
            facts.append(("Reason", row.reason))
        if job is not None:
            facts.append(("Managed job", link(f"/jobs/{job.id}", f"{job.id} ({job.name})")))
        return join(render("<dt>$k</dt><dd>$v</dd>", k=key, v=value) for key, value in facts)

    def body(self, snapshot: Snapshot) -> Markup:
        return render(
            """<h1>Workload $namespace/$name</h1>
<dl class="facts" id="facts">$facts</dl>
<h2>Timeline</h2>
<ol class="timeline" id="timeline">$timeline</ol>
<h2>Logs</h2>
<pre class="logs" id="logs" data-max="4000" tabindex="0" aria-label="Logs">$logs</pre>""",
            namespace=self.namespace,
            name=self.name,
            facts=snapshot.regions["facts"],
            timeline=snapshot.regions.get("timeline", Markup("")),
            logs=snapshot.regions.get("logs", Markup("")),
        )
