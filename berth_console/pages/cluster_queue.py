"""A ClusterQueue: its quota, its pending workloads in admission order, its admitted ones."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from berth_console.markup import Markup, join, render
from berth_console.pages.base import Context, Snapshot, View, badge, empty_row, link, path_part
from berth_console.pages.overview import LEGEND, active_condition, quota_list
from berth_console.pending import SHOWN
from berth_console.queries import QueryError
from berth_console.quota import quotas
from berth_console.timefmt import short_age
from berth_console.workloads import ACTIVE

__all__ = ["ClusterQueueView", "workload_href"]


def workload_href(namespace: str, name: str) -> str:
    return f"/workloads/{path_part(namespace)}/{path_part(name)}"


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return ""
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return short_age(time.time() - then.timestamp())


class ClusterQueueView(View):
    nav = "overview"
    topics = ("queues", "workloads")
    poll_s = 2.0  # admission's pending reasons change without an event (they are coalesced)

    def __init__(self, context: Context, name: str) -> None:
        super().__init__(context)
        self.name = name
        self.title = f"ClusterQueue {name}"

    async def snapshot(self) -> Snapshot:
        queue = self.model.cluster_queues.get(self.name)
        if queue is None:
            return Snapshot(regions={}, structure=False)
        return Snapshot(
            regions={
                "facts": self._facts(queue),
                "quota": quota_list(quotas([queue]).get(self.name, [])),
                "pending": await self._pending(queue),
                "admitted": self._admitted(),
            },
            structure=True,
        )

    def _facts(self, queue: dict[str, Any]) -> Markup:
        spec, status = queue.get("spec", {}), queue.get("status", {})
        preemption = spec.get("preemption", {})
        local = [
            f"{lq['metadata']['namespace']}/{lq['metadata']['name']}"
            for lq in self.model.local_queues
            if lq.get("spec", {}).get("clusterQueue") == self.name
        ]
        facts = [
            ("Cohort", spec.get("cohortName") or spec.get("cohort") or "none"),
            ("Active", active_condition(queue)),
            ("Pending", status.get("pendingWorkloads", 0)),
            ("Admitted", status.get("admittedWorkloads", 0)),
            ("Queueing strategy", spec.get("queueingStrategy", "BestEffortFIFO")),
            (
                "Preemption",
                f"within the queue: {preemption.get('withinClusterQueue', 'Never')}, reclaim"
                f" within the cohort: {preemption.get('reclaimWithinCohort', 'Never')}",
            ),
            ("LocalQueues", ", ".join(local) or "none"),
            ("Stop policy", spec.get("stopPolicy") or "None"),
        ]
        return join(render("<dt>$k</dt><dd>$v</dd>", k=key, v=value) for key, value in facts)

    async def _pending(self, queue: dict[str, Any]) -> Markup:
        try:
            items = await self.context.pending.get(self.name)
        except QueryError as error:
            return empty_row(8, f"Admission did not answer: {error}")
        if not items:
            return empty_row(8, "Nothing pending.")
        rows = self.model.workloads.rows
        lines = []
        for item in items:
            row = rows.get((item["namespace"], item["name"]))
            if row is not None and (row.status in ACTIVE or row.done):
                continue  # admitted since admission answered (its answer is up to 1 s old)
            boost = int(item.get("priority", 0)) - int(
                item.get("basePriority", item.get("priority", 0))
            )
            reserved = (
                Markup(" ") + badge("reserved", "warn")
                if row is not None and row.reserved
                else Markup("")
            )
            lines.append(
                render(
                    '<tr><td class="num">$position</td><td>$link</td><td>$lq</td>'
                    '<td class="num">$priority</td><td class="num">$base</td>'
                    '<td class="num">$boost$reserved</td><td>$age</td>'
                    '<td class="reason">$reason</td></tr>',
                    position=item.get("positionInClusterQueue", ""),
                    link=link(
                        workload_href(item["namespace"], item["name"]),
                        f"{item['namespace']}/{item['name']}",
                    ),
                    lq=item.get("localQueueName", ""),
                    priority=item.get("priority", 0),
                    base=item.get("basePriority", item.get("priority", 0)),
                    boost=f"+{boost}" if boost > 0 else boost,
                    reserved=reserved,
                    age=_age(item.get("creationTimestamp")),
                    reason=item.get("reason", ""),
                )
            )
        if not lines:
            return empty_row(8, "Nothing pending.")
        total = int(queue.get("status", {}).get("pendingWorkloads", len(items)))
        if total > len(items) and len(items) >= SHOWN:
            lines.append(
                empty_row(8, f"… and {total - len(items)} more (the first {SHOWN} are shown).")
            )
        return join(lines)

    def _admitted(self) -> Markup:
        held = sorted(
            (
                row
                for row in self.model.workloads.rows.values()
                if row.cluster_queue == self.name and row.status in ACTIVE
            ),
            key=lambda row: (row.admitted_at.timestamp() if row.admitted_at else 0.0, row.name),
        )
        if not held:
            return empty_row(6, "Nothing admitted.")
        now = time.time()
        return join(
            render(
                '<tr><td>$link</td><td>$lq</td><td>$flavors</td><td class="num">$priority</td>'
                "<td>$status</td><td>$age</td></tr>",
                link=link(workload_href(row.namespace, row.name), f"{row.namespace}/{row.name}"),
                lq=row.local_queue,
                flavors=row.flavors,
                priority=row.priority,
                status=badge(row.status),
                age=short_age(now - row.admitted_at.timestamp()) if row.admitted_at else "",
            )
            for row in held
        )

    def _actions(self) -> Markup:
        """Stop (HoldAndDrain, or Hold keeping what runs) and resume, for the ClusterQueue
        and each of its LocalQueues: one form, its token typed once; each button posts to
        its queue's action (berth_console/actions.py)."""
        locals_ = sorted(
            (lq["metadata"]["namespace"], lq["metadata"]["name"], lq.get("spec", {}))
            for lq in self.model.local_queues
            if lq.get("spec", {}).get("clusterQueue") == self.name
        )
        if not self.context.actions_enabled:
            return render(
                '<form class="action" aria-label="Queue actions"><button type="button" disabled'
                ' aria-describedby="ro-note">Stop queue</button><button type="button" disabled'
                ' aria-describedby="ro-note">Resume queue</button><span id="ro-note"'
                ' class="muted">This console is read-only: start it with BERTH_CONSOLE_TOKEN to'
                " allow actions.</span></form>"
            )
        cq = path_part(self.name)
        rows = join(
            render(
                '<li>LocalQueue $ns/$lq ($policy) <button type="submit"'
                ' formaction="/lq/$nsp/$lqp/stop">Stop $lq</button>'
                '<button type="submit" formaction="/lq/$nsp/$lqp/resume">Resume $lq</button></li>',
                ns=namespace,
                lq=name,
                nsp=path_part(namespace),
                lqp=path_part(name),
                policy=f"stopPolicy {spec.get('stopPolicy') or 'None'}",
            )
            for namespace, name, spec in locals_
        )
        return render(
            '<form class="action" id="queue-actions" method="post" action="/cq/$cq/stop"'
            ' aria-label="Queue actions"><label>Operator token <input type="password"'
            ' name="token" required autocomplete="current-password"></label>'
            '<label class="check"><input type="checkbox" name="keep_already_running">'
            " Keep already running (stop admits nothing new but lets admitted workloads"
            " finish)</label>"
            '<button type="submit" id="stop-queue">Stop queue</button>'
            '<button type="submit" id="resume-queue" formaction="/cq/$cq/resume">Resume queue'
            '</button><ul class="local-queue-actions">$rows</ul></form>',
            cq=cq,
            rows=rows,
        )

    def body(self, snapshot: Snapshot) -> Markup:
        if not snapshot.structure:
            return render(
                '<h1>ClusterQueue $name</h1><p class="notice">Admission does not know a'
                ' ClusterQueue called $name (yet). <a href="/">Back to the overview</a>.</p>',
                name=self.name,
            )
        regions = snapshot.regions
        return render(
            """<h1>ClusterQueue $name</h1>
<dl class="facts" id="facts">$facts</dl>
$actions
<h2>Quota</h2>$legend<div id="quota">$quota</div>
<h2 id="pending-heading">Pending workloads, in admission order</h2>
<table aria-labelledby="pending-heading"><thead><tr>
<th scope="col" class="num">Position</th><th scope="col">Workload</th>
<th scope="col">LocalQueue</th><th scope="col" class="num">Priority</th>
<th scope="col" class="num">Base</th><th scope="col" class="num">Ageing boost</th>
<th scope="col">Age</th><th scope="col">Why it waits</th></tr></thead>
<tbody id="pending">$pending</tbody></table>
<h2 id="admitted-heading">Admitted workloads</h2>
<table aria-labelledby="admitted-heading"><thead><tr><th scope="col">Workload</th>
<th scope="col">LocalQueue</th><th scope="col">Flavors</th><th scope="col" class="num">Priority</th>
<th scope="col">Status</th><th scope="col">Admitted for</th></tr></thead>
<tbody id="admitted">$admitted</tbody></table>""",
            name=self.name,
            actions=self._actions(),
            facts=regions["facts"],
            legend=LEGEND,
            quota=regions["quota"],
            pending=regions["pending"],
            admitted=regions["admitted"],
        )
