"""Overview: cohorts and their ClusterQueues, with quota bars and pending over time."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from berth_console.markup import Markup, join, render
from berth_console.pages.base import Snapshot, View, badge, link, path_part
from berth_console.quota import Quota, quotas, show
from berth_console.svg import quota_bar, sparkline
from berth_console.timefmt import clock

__all__ = ["LEGEND", "OverviewView", "active_condition", "quota_list"]

LEGEND = Markup(
    '<ul class="legend" aria-label="Legend of the quota bars">'
    '<li><span class="key used"></span>in use (own quota)</li>'
    '<li><span class="key lent"></span>lent to the cohort (estimated)</li>'
    '<li><span class="key borrowed"></span>borrowed from the cohort</li>'
    '<li><span class="key free"></span>unused nominal quota</li>'
    '<li><span class="key nominal"></span>nominal quota</li></ul>'
)

_HEAD = Markup(
    '<thead><tr><th scope="col">ClusterQueue</th><th scope="col">Active</th>'
    '<th scope="col" class="num">Pending</th><th scope="col" class="num">Admitted</th>'
    '<th scope="col">Pending over time</th><th scope="col">Quota per flavor and resource</th>'
    "</tr></thead>"
)


def active_condition(queue: dict[str, Any]) -> Markup:
    for condition in queue.get("status", {}).get("conditions", []):
        if condition.get("type") == "Active":
            active = condition.get("status") == "True"
            return render(
                '<span title="$why">$badge</span>',
                why=f"{condition.get('reason', '')}: {condition.get('message', '')}",
                badge=badge("Active" if active else "Inactive", "ok" if active else "bad"),
            )
    return badge("Unknown", "warn")


def quota_list(items: list[Quota]) -> Markup:
    if not items:
        return render('<span class="muted">no quota</span>')
    rows = []
    for index, quota in enumerate(items):
        if index == 0 or items[index - 1].flavor != quota.flavor:
            rows.append(render('<li class="flavor-name">$flavor</li>', flavor=quota.flavor))
        rows.append(
            render(
                "<li><span>$resource</span>$bar"
                '<span class="nums">$used / $nominal · $borrowed borrowed · $lent lent</span></li>',
                resource=quota.resource,
                bar=quota_bar(quota),
                used=show(quota.resource, quota.used),
                nominal=show(quota.resource, quota.nominal),
                borrowed=show(quota.resource, quota.borrowed),
                lent=show(quota.resource, quota.lent),
            )
        )
    return render('<ul class="quotas">$rows</ul>', rows=join(rows))


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def region_id(name: str) -> str:
    return f"cq-{name}"


class OverviewView(View):
    title = "Overview"
    nav = "overview"
    topics = ("queues",)
    share_s = 60.0  # nothing on it changes but through its topic

    async def snapshot(self) -> Snapshot:
        model = self.model
        cohorts = model.cohorts()
        by_queue = quotas(model.cluster_queues.values())
        regions: dict[str, Markup] = {"summary": self._summary()}
        for names in cohorts.values():
            for name in names:
                regions[region_id(name)] = self._row(name, by_queue.get(name, []))
        structure = tuple(
            (cohort, model.cohort_share(cohort), tuple(names)) for cohort, names in cohorts.items()
        )
        return Snapshot(regions=regions, structure=structure)

    def _summary(self) -> Markup:
        model = self.model
        if model.queues_error:
            return render(
                '<p class="notice error">Admission did not answer: $why</p>', why=model.queues_error
            )
        if not model.queues_at:
            return render('<p class="muted">Waiting for the first answer of admission…</p>')
        statuses = [queue.get("status", {}) for queue in model.cluster_queues.values()]
        return render(
            '<p class="summary">$queues in $cohorts · $pending pending ·'
            " $admitted admitted · as admission reported at $at</p>",
            queues=plural(len(statuses), "ClusterQueue"),
            cohorts=plural(len([c for c in model.cohorts() if c]), "cohort"),
            pending=sum(int(s.get("pendingWorkloads", 0)) for s in statuses),
            admitted=sum(int(s.get("admittedWorkloads", 0)) for s in statuses),
            at=clock(model.queues_at or time.time()),
        )

    def _row(self, name: str, items: list[Quota]) -> Markup:
        """A ClusterQueue's row, rendered again only when what it shows changed: a refresh
        of a hundred queues where one moved renders one row."""
        queue = self.model.cluster_queues[name]
        samples = tuple(self.model.pending_history.get(name, ()))
        inputs = (msgspec.json.encode(queue), tuple(items), samples)
        key = f"cq-row:{name}"
        cached = self.model.fragments.get(key)
        if cached is not None and cached[0] == inputs:
            kept: Markup = cached[1]
            return kept
        status = queue.get("status", {})
        row = render(
            '<th scope="row">$link</th><td>$active</td><td class="num">$pending</td>'
            '<td class="num">$admitted</td><td>$spark</td><td>$quota</td>',
            link=link(f"/cq/{path_part(name)}", name),
            active=active_condition(queue),
            pending=status.get("pendingWorkloads", 0),
            admitted=status.get("admittedWorkloads", 0),
            spark=sparkline(samples),
            quota=quota_list(items),
        )
        self.model.fragments[key] = (inputs, row)
        return row

    def body(self, snapshot: Snapshot) -> Markup:
        sections = []
        for cohort, names in self.model.cohorts().items():
            rows = join(
                render(
                    '<tr id="$id">$row</tr>',
                    id=region_id(name),
                    row=snapshot.regions[region_id(name)],
                )
                for name in names
                if region_id(name) in snapshot.regions
            )
            heading = f"Cohort {cohort}" if cohort else "ClusterQueues in no cohort"
            share = self.model.cohort_share(cohort)
            if share is not None:  # Kueue's status.fairSharing.weightedShare
                heading += f" · weighted share {share}"
            sections.append(
                render(
                    '<section aria-labelledby="$hid"><h2 id="$hid">$heading</h2>'
                    '<table class="queues">$head<tbody>$rows</tbody></table></section>',
                    hid=f"cohort-{cohort or '-none'}",
                    heading=heading,
                    head=_HEAD,
                    rows=rows,
                )
            )
        if not sections and self.model.queues_at:
            sections.append(
                render(
                    '<p class="muted">No ClusterQueues yet: <code>berth apply -f</code> one.</p>'
                )
            )
        return render(
            '<h1>Overview</h1><div id="summary">$summary</div>$legend'
            '<div id="cohorts">$sections</div>',
            summary=snapshot.regions["summary"],
            legend=LEGEND,
            sections=join(sections),
        )
