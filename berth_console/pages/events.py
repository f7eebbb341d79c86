"""The event feed: the bus as it happens, filterable by namespace and ClusterQueue."""

from __future__ import annotations

from berth_console.describe import describe, kind_of
from berth_console.markup import Markup, join, render
from berth_console.model import Recent
from berth_console.pages.base import Addition, Context, Snapshot, View, link, options
from berth_console.pages.cluster_queue import workload_href
from berth_console.timefmt import time_tag
from shared.events import JobStatusChanged, LeaderElected

__all__ = ["EventsView"]

SHOWN = 200  # lines a page starts with, and the most one update adds


class EventsView(View):
    title = "Events"
    nav = "events"
    topics = ("events",)

    def __init__(self, context: Context, *, namespace: str, cluster_queue: str) -> None:
        super().__init__(context)
        self.namespace = namespace
        self.cluster_queue = cluster_queue
        self._seq = 0
        self._started = False

    def _keep(self, item: Recent) -> bool:
        ref = item.event.workload
        if self.namespace and ref.namespace != self.namespace:
            return False
        return not self.cluster_queue or item.cluster_queue == self.cluster_queue

    def _line(self, item: Recent) -> Markup:
        event = item.event
        label, kind = kind_of(event)
        ref = event.workload
        if isinstance(event, JobStatusChanged):
            subject = link(f"/jobs/{event.job_id}", f"managed job {event.job_id}")
        elif isinstance(event, LeaderElected):
            subject = render("the $role lease", role=event.role)
        else:
            subject = link(workload_href(ref.namespace, ref.name), ref.key)
        return render(
            '<li>$time<span class="kind $kind">$label</span><span>$subject</span>'
            "<span>$text</span></li>",
            time=time_tag(event.time),
            kind=kind,
            label=label,
            subject=subject,
            text=describe(event),
        )

    async def snapshot(self) -> Snapshot:
        new = list(self.model.recent_after(self._seq, self._keep))
        self._seq = self.model.seq
        regions: dict[str, Markup] = {}
        additions: list[Addition] = []
        lines = join(self._line(item) for item in reversed(new[-SHOWN:]))  # newest first
        if not self._started or len(new) > SHOWN:
            regions["feed"] = lines or render('<li class="empty muted">No events yet.</li>')
        elif new:
            additions.append(Addition("feed", lines, at="start"))
        self._started = True
        return Snapshot(regions=regions, additions=additions)

    def body(self, snapshot: Snapshot) -> Markup:
        namespaces = sorted({row.namespace for row in self.model.workloads.rows.values()})
        return render(
            """<h1>Events</h1>
<form class="filters" method="get" action="/events" aria-label="Filter the events">
<label>Namespace <select name="namespace">$namespaces</select></label>
<label>ClusterQueue <select name="cq">$queues</select></label>
<button type="submit">Filter</button> <a href="/events">Clear</a>
</form>
<p class="muted">Newest first; the last $shown matching events, then each one as it happens.</p>
<ol class="feed" id="feed" data-max="500" aria-label="Events, newest first">$feed</ol>""",
            namespaces=options(namespaces, self.namespace, blank="any"),
            queues=options(sorted(self.model.cluster_queues), self.cluster_queue, blank="any"),
            shown=SHOWN,
            feed=snapshot.regions.get("feed", Markup("")),
        )
