"""Workloads: every workload the stream told of, filterable by namespace, queue and status."""

from __future__ import annotations

import time

from berth_console.markup import Markup, join, render
from berth_console.pages.base import Context, Snapshot, View, badge, empty_row, link, options
from berth_console.pages.cluster_queue import workload_href
from berth_console.timefmt import short_age
from berth_console.workloads import STATUSES, WorkloadRow

__all__ = ["WorkloadsView"]

SHOWN = 500  # rows on the page; the count says how many matched


class WorkloadsView(View):
    title = "Workloads"
    nav = "workloads"
    topics = ("workloads",)
    share_s = 5.0  # ages in the table may lag this much when nothing else changes

    def __init__(self, context: Context, *, namespace: str, queue: str, status: str) -> None:
        super().__init__(context)
        self.namespace = namespace
        self.queue = queue
        self.status = status

    def share_key(self) -> str:
        return f"workloads?{self.namespace}&{self.queue}&{self.status}"

    def _matches(self, row: WorkloadRow) -> bool:
        return (
            (not self.namespace or row.namespace == self.namespace)
            and (not self.queue or self.queue in (row.local_queue, row.cluster_queue))
            and (not self.status or row.status == self.status)
        )

    async def snapshot(self) -> Snapshot:
        rows = self.model.workloads.rows
        matched = sorted(
            (row for row in rows.values() if self._matches(row)), key=lambda row: row.key
        )
        shown = matched[:SHOWN]
        now = time.time()
        lines = [
            render(
                "<tr><td>$ns</td><td>$link</td><td>$lq</td><td>$cq</td><td>$status</td>"
                '<td class="num">$priority</td><td>$age</td><td class="reason">$reason</td></tr>',
                ns=row.namespace,
                link=link(workload_href(row.namespace, row.name), row.name),
                lq=row.local_queue,
                cq=row.cluster_queue,
                status=badge(row.status),
                priority=row.priority,
                age=short_age(now - row.created.timestamp()),
                reason=row.reason,
            )
            for row in shown
        ]
        if not lines:
            lines = [empty_row(8, "No workload matches." if rows else "No workloads yet.")]
        reading = "" if self.model.caught_up else " (still reading the event stream)"
        count = render(
            "$shown of $matched matching workloads shown ($total in all)$reading.",
            shown=len(shown),
            matched=len(matched),
            total=len(rows),
            reading=reading,
        )
        return Snapshot(regions={"count": count, "rows": join(lines)})

    def body(self, snapshot: Snapshot) -> Markup:
        rows = self.model.workloads.rows.values()
        namespaces = sorted({row.namespace for row in rows})
        queues = sorted(
            {lq["spec"]["clusterQueue"] for lq in self.model.local_queues}
            | {lq["metadata"]["name"] for lq in self.model.local_queues}
            | set(self.model.cluster_queues)
            | {row.local_queue for row in rows}
        )
        return render(
            """<h1>Workloads</h1>
<form class="filters" method="get" action="/workloads" aria-label="Filter the workloads">
<label>Namespace <select name="namespace">$namespaces</select></label>
<label>Queue (LocalQueue or ClusterQueue) <select name="queue">$queues</select></label>
<label>Status <select name="status">$statuses</select></label>
<button type="submit">Filter</button> <a href="/workloads">Clear</a>
</form>
<p class="muted" id="count">$count</p>
<table aria-describedby="count"><thead><tr><th scope="col">Namespace</th><th scope="col">Name</th>
<th scope="col">LocalQueue</th><th scope="col">ClusterQueue</th><th scope="col">Status</th>
<th scope="col" class="num">Priority</th><th scope="col">Age</th><th scope="col">Reason</th></tr>
</thead><tbody id="rows">$rows</tbody></table>""",
            namespaces=options(namespaces, self.namespace, blank="any"),
            queues=options(queues, self.queue, blank="any"),
            statuses=options(list(STATUSES), self.status, blank="any"),
            count=snapshot.regions["count"],
            rows=snapshot.regions["rows"],
        )
