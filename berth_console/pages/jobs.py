"""Managed jobs: ``berth jobs queue``'s table, and one job's runs, history and logs."""

from __future__ import annotations

import time

from berth_console.markup import Markup, join, render
from berth_console.pages.base import Addition, Context, Snapshot, View, badge, empty_row, link
from berth_console.pages.cluster_queue import workload_href
from berth_console.pages.workload import log_chunk
from berth_console.queries import QueryError
from berth_console.timefmt import time_tag
from shared.jobs import QUEUE_COLUMNS, TERMINAL, ManagedJob, queue_row

__all__ = ["COLUMNS", "JobView", "JobsView", "job_cells"]

COLUMNS = QUEUE_COLUMNS


def job_cells(job: ManagedJob, now: float) -> list[object]:
    """The row `berth jobs queue` prints, cell by cell: the ID a link, the STATUS a badge."""
    cells = queue_row(job, now)
    return [link(f"/jobs/{job.id}", job.id), *cells[1:-1], badge(job.status.value)]


def _head() -> Markup:
    return join(
        render(
            '<th scope="col"$num>$label</th>',
            label=label,
            num=Markup(' class="num"') if label in ("ID", "#RECOVERIES") else Markup(""),
        )
        for label in COLUMNS
    )


def _row(job: ManagedJob, now: float) -> Markup:
    cells = job_cells(job, now)
    return render(
        '<tr id="job-$id">$cells</tr>',
        id=job.id,
        cells=join(
            render(
                "<td$num>$v</td>",
                v=cell,
                num=Markup(' class="num"') if index in (0, 6) else Markup(""),
            )
            for index, cell in enumerate(cells)
        ),
    )


class JobsView(View):
    title = "Managed jobs"
    nav = "jobs"
    topics = ("jobs",)
    poll_s = 1.0  # durations tick

    async def snapshot(self) -> Snapshot:
        jobs = sorted(self.model.jobs.values(), key=lambda job: -job.id)
        active = [job for job in jobs if job.status not in TERMINAL]
        if active:
            counts: dict[str, int] = {}
            for job in active:
                counts[job.status.value] = counts.get(job.status.value, 0) + 1
            summary = "In progress tasks: " + ", ".join(
                f"{n} {status}" for status, n in sorted(counts.items())
            )
        else:
            summary = "No in-progress managed jobs."
        now = time.time()
        rows = join(_row(job, now) for job in jobs) or empty_row(len(COLUMNS), "No managed jobs.")
        return Snapshot(regions={"summary": render("$s", s=summary), "rows": rows})

    def body(self, snapshot: Snapshot) -> Markup:
        return render(
            """<h1>Managed jobs</h1>
<p id="summary">$summary</p>
<table aria-describedby="summary"><thead><tr>$head</tr></thead>
<tbody id="rows">$rows</tbody></table>""",
            summary=snapshot.regions["summary"],
            head=_head(),
            rows=snapshot.regions["rows"],
        )


class JobView(View):
    nav = "jobs"
    topics = ("jobs",)
    poll_s = 1.0  # durations tick, logs grow

    def __init__(self, context: Context, job_id: int) -> None:
        super().__init__(context)
        self.job_id = job_id
        self.title = f"Managed job {job_id}"
        self._offsets: dict[str, dict[str, int]] = {}
        self._headed: set[tuple[str, str]] = set()
        self._logs_final = False
        self._started = False

    async def snapshot(self) -> Snapshot:
        job = self.model.jobs.get(self.job_id)
        if job is None:
            return Snapshot(regions={}, structure=False)
        now = time.time()
        regions = {
            "row": join(render("<td>$v</td>", v=cell) for cell in job_cells(job, now)),
            "facts": self._facts(job),
            "actions": self._actions(job),
            "runs": self._runs(job),
            "history": self._history(job),
        }
        logs = await self._logs(job)
        additions: list[Addition] = []
        if not self._started:
            regions["logs"] = logs or render('<span class="muted">No output (yet).</span>')
        elif logs:
            additions.append(Addition("logs", logs))
        self._started = True
        return Snapshot(regions=regions, structure=True, additions=additions)

    def _facts(self, job: ManagedJob) -> Markup:
        facts: list[tuple[str, object]] = [
            ("Namespace", job.namespace),
            ("ClusterQueue", job.cluster_queue or "-"),
            ("Base priority", job.base_priority),
            (
                "Ageing boost",
                f"+{job.boost}" + (" (reserved: first in its queue)" if job.reserved else ""),
            ),
            ("Restarts on errors", f"{job.restarts_on_errors} of {job.max_restarts_on_errors}"),
        ]
        if job.message:
            facts.append(("Message", job.message))
        return join(render("<dt>$k</dt><dd>$v</dd>", k=key, v=value) for key, value in facts)

    def _actions(self, job: ManagedJob) -> Markup:
        if job.done:
            return Markup("")
        if not self.context.actions_enabled:
            return render(
                '<form class="action" aria-label="Job actions"><button type="button" disabled'
                ' aria-describedby="ro-note">Cancel job</button><span id="ro-note" class="muted">'
                "This console is read-only: start it with BERTH_CONSOLE_TOKEN to allow actions."
                "</span></form>"
            )
        return render(
            '<form class="action" method="post" action="/jobs/$id/cancel" aria-label="Job actions">'
            '<label>Operator token <input type="password" name="token" required'
            ' autocomplete="current-password"></label>'
            '<button type="submit">Cancel job</button></form>',
            id=job.id,
        )

    def _runs(self, job: ManagedJob) -> Markup:
        if not job.attempts:
            return empty_row(4, "No run yet.")
        return join(
            render(
                '<tr><td class="num">$n</td><td>$link</td><td class="num">$admissions</td>'
                "<td>$evicted</td></tr>",
                n=index,
                link=link(workload_href(job.namespace, attempt.name), attempt.name),
                admissions=attempt.generation,
                evicted=f"run {attempt.evicted_generation}" if attempt.evicted_generation else "-",
            )
            for index, attempt in enumerate(job.attempts, start=1)
        )

    def _history(self, job: ManagedJob) -> Markup:
        return join(
            render(
                "<li>$time<span>$status</span><span>$message</span></li>",
                time=time_tag(step.time),
                status=badge(step.status),
                message=step.message,
            )
            for step in job.history
        )

    async def _logs(self, job: ManagedJob) -> Markup:
        queries = self.context.queries
        if queries is None or self._logs_final:
            return Markup("")
        self._logs_final = job.done  # once done, one last read picks up the end
        chunks: list[Markup] = []
        for attempt in job.attempts:
            offsets = self._offsets.setdefault(attempt.name, {})
            try:
                files = await queries.logs(job.namespace, attempt.name, offsets)
            except QueryError as error:
                if not self._started:
                    chunks.append(render('<span class="muted">[$why]</span>\n', why=str(error)))
                continue
            for item in files:
                if item["data"]:
                    key = (attempt.name, item["file"])
                    chunks.append(
                        log_chunk(
                            f"{attempt.name} {item['file']}",
                            item["data"],
                            first=key not in self._headed,
                        )
                    )
                    self._headed.add(key)
        return join(chunks)

    def body(self, snapshot: Snapshot) -> Markup:
        if not snapshot.structure:
            return render(
                '<h1>Managed job $id</h1><p class="notice">No managed job $id (yet).'
                ' <a href="/jobs">All managed jobs</a>.</p>',
                id=self.job_id,
            )
        job = self.model.jobs[self.job_id]
        regions = snapshot.regions
        return render(
            """<h1>Managed job $id: $name</h1>
<table><thead><tr>$head</tr></thead><tbody><tr id="row">$row</tr></tbody></table>
<div id="actions">$actions</div>
<dl class="facts" id="facts">$facts</dl>
<h2 id="runs-heading">Runs</h2>
<table aria-labelledby="runs-heading"><thead><tr><th scope="col" class="num">#</th>
<th scope="col">Workload</th>
<th scope="col" class="num">Admissions</th><th scope="col">Last preempted</th></tr></thead>
<tbody id="runs">$runs</tbody></table>
<h2>Status history</h2>
<ol class="timeline" id="history">$history</ol>
<h2>Logs</h2>
<pre class="logs" id="logs" data-max="4000" tabindex="0"
 aria-label="Logs of every run">$logs</pre>""",
            id=job.id,
            name=job.name,
            head=_head(),
            row=regions["row"],
            actions=regions["actions"],
            facts=regions["facts"],
            runs=regions["runs"],
            history=regions["history"],
            logs=regions["logs"],
        )
