"""The console's model: the fold of the event stream, quota figures, markup, live diffs."""

from __future__ import annotations

import asyncio

import msgspec

from berth_console.changes import Changes
from berth_console.live import _Sent, fingerprint
from berth_console.markup import Markup, render
from berth_console.model import Model
from berth_console.pages.base import Addition, Context, Snapshot, View
from berth_console.pending import PendingCache
from berth_console.quota import quotas
from berth_console.svg import quota_bar, sparkline
from shared.events import LeaderElected, WorkloadRef
from tests.console_data import admitted, cluster_queue, feed, pending, preempted, started, submitted


def test_rows_follow_a_workload_through_preemption_and_requeue() -> None:
    """Submitted, pending, admitted, running, preempted: the row ends pending again, with
    its eviction counted, its preemptor named and the ageing boost it was requeued with."""
    model = Model()
    feed(
        model, [submitted("a"), pending("a"), admitted("a"), started("a"), *preempted("a", by="b")]
    )
    row = model.workloads.rows[("team-a", "a")]
    assert (row.status, row.evictions, row.preempted_by, row.boost, row.reserved) == (
        "Pending",
        1,
        "team-a/b",
        5,
        True,
    )
    assert row.cluster_queue == "cq" and row.admitted_at is None


def test_redelivered_and_stale_events_change_nothing() -> None:
    """A sequence seen before is ignored; an admission of an older run does not go back."""
    model = Model()
    feed(model, [submitted("a"), admitted("a", generation=2)])
    model.apply(1, "berth.wl.submitted.team-a.a", submitted("a"))  # redelivered
    feed(model, [admitted("a", generation=1)])
    row = model.workloads.rows[("team-a", "a")]
    assert (row.status, row.generation) == ("Admitted", 2)
    assert len(model.recent) == 3


def test_a_deposed_leaders_late_admission_is_not_shown() -> None:
    """As the services do (shared/fencing.py): after admission's term 2 marker, a term 1
    admission is void; the marker itself shows in the feed, not as a workload."""
    model = Model()
    marker = LeaderElected(
        source="admission", workload=WorkloadRef("", "", ""), role="admission", holder="b", term=2
    )
    feed(model, [submitted("a"), marker, msgspec.structs.replace(admitted("a"), term=1)])
    assert model.workloads.rows[("team-a", "a")].status == "Pending"
    assert model.voided == 1
    assert [type(item.event).__name__ for item in model.recent] == [
        "WorkloadSubmitted",
        "LeaderElected",
    ]


def test_recent_after_and_missed() -> None:
    """Pages take the events after the last one they showed; a page that fell behind the
    ring buffer knows it must read its history again."""
    model = Model()
    model.recent = type(model.recent)(maxlen=3)
    feed(model, [submitted(name) for name in "abcde"])
    names = [item.event.workload.name for item in model.recent_after(3, lambda _: True)]
    assert names == ["d", "e"]
    assert model.missed_since(1) and not model.missed_since(2)


def test_lent_is_the_cohort_borrowing_shared_by_lenders() -> None:
    """What one queue borrows shows as lent by the queues with unused quota, in proportion
    to what each could lend (capped by its lendingLimit)."""
    by_queue = quotas(
        [
            cluster_queue("borrower", cohort="c", nominal="4", used="10", borrowed="6"),
            cluster_queue("idle", cohort="c", nominal="10", used="0"),
            cluster_queue("capped", cohort="c", nominal="10", used="0", lending_limit="5"),
            cluster_queue("alone", nominal="10", used="3"),
        ]
    )
    lent = {name: items[0].lent for name, items in by_queue.items()}
    assert lent == {"borrower": 0, "idle": 4000, "capped": 2000, "alone": 0}
    borrower = by_queue["borrower"][0]
    assert (borrower.own_used, borrower.borrowed) == (4000, 6000)


def test_quota_bar_says_its_numbers() -> None:
    """The bar's text alternative carries the figures; borrowed quota is drawn past the mark."""
    [quota] = quotas([cluster_queue("q", cohort="c", nominal="4", used="6", borrowed="2")])["q"]
    bar = quota_bar(quota)
    assert 'aria-label="cpu in on-demand: 6 of 4 in use, 2 borrowed, 0 lent"' in bar
    assert '<rect class="borrowed" x="160.0"' in bar  # 4 of 6 across 240 px
    assert "now 3, peak 7" in sparkline([(0.0, 7), (5.0, 3)])


def test_markup_escapes_everything_but_markup() -> None:
    """Data from the bus never becomes markup; markup made here stays markup."""
    html = render("<td>$a</td><td>$b</td>", a='<script>"x"</script>', b=Markup("<b>ok</b>"))
    assert html == "<td>&lt;script&gt;&quot;x&quot;&lt;/script&gt;</td><td><b>ok</b></td>"


async def test_changes_wake_waiters_of_their_topic_only() -> None:
    """A bump wakes pages that follow its topic; others sleep until their timeout."""
    changes = Changes()
    seen = changes.versions(["jobs"])
    waiter = asyncio.create_task(changes.wait(["jobs"], seen, within=5))
    other = asyncio.create_task(changes.wait(["queues"], changes.versions(["queues"]), within=0.2))
    await asyncio.sleep(0)
    changes.bump("jobs")
    assert await waiter is True
    assert await other is False


class _Two(View):
    def __init__(self) -> None:
        super().__init__(Context(model=Model(), queries=None, pending=PendingCache(None)))
        self.a, self.b = "one", "two"

    async def snapshot(self) -> Snapshot:
        return Snapshot(regions={"a": render("$v", v=self.a), "b": render("$v", v=self.b)})

    def body(self, snapshot: Snapshot) -> Markup:
        return Markup("body")


async def test_a_stream_sends_only_what_the_browser_lacks() -> None:
    """The first snapshot sends only regions that changed since the page was served; later
    ones only changed regions and additions."""
    view = _Two()
    served = fingerprint(await view.snapshot())
    view.b = "TWO"
    sent = _Sent(served)
    first = sent.updates(view, await view.snapshot())
    assert [m.decode().split("\n")[1] for m in first] == ['data: {"id":"b","html":"TWO"}']
    again = await view.snapshot()
    again.additions.append(Addition("a", Markup("<li>x</li>"), at="start"))
    assert [m.decode().split("\n")[0] for m in sent.updates(view, again)] == ["event: add"]
    assert _Sent(None).updates(view, again)[0].startswith(b'event: replace\ndata: {"id":"page"')


async def test_browsers_on_the_overview_share_one_render() -> None:
    """Two browsers on the overview get the same snapshot until admission's answer changes;
    then only the row of the queue that moved is rendered again."""
    from berth_console.pages.overview import OverviewView

    model = Model()
    model.set_queues([cluster_queue("a"), cluster_queue("b")], [])
    context = Context(model=model, queries=None, pending=PendingCache(None))
    first, second = OverviewView(context), OverviewView(context)
    assert await first.current() is await second.current()
    row_b = model.fragments["cq-row:b"][1]
    model.set_queues([cluster_queue("a", pending=3), cluster_queue("b")], [])
    fresh = await second.current()
    assert ">3<" in fresh.regions["cq-a"] and fresh.regions["cq-b"] is row_b


class _CountingQueries:
    """Stands in for the bus: counts admission's pending queries."""

    def __init__(self) -> None:
        self.asked = 0

    async def ask(self, service: str, verb: str, request: dict[str, object]) -> dict[str, object]:
        self.asked += 1
        await asyncio.sleep(0.05)
        return {"items": [{"name": "a"}], "next": None}


async def test_pending_is_asked_once_a_second_whatever_the_browsers() -> None:
    """Fifty pages on one ClusterQueue, refreshing at once and again: admission is asked once."""
    queries = _CountingQueries()
    cache = PendingCache(queries)  # type: ignore[arg-type]
    answers = await asyncio.gather(*(cache.get("cq") for _ in range(50)))
    answers += await asyncio.gather(*(cache.get("cq") for _ in range(50)))
    assert queries.asked == 1 and all(answer == [{"name": "a"}] for answer in answers)


def test_a_reservation_waiting_for_checks_says_so_until_admitted() -> None:
    """Reserved only: admitted in quota, the reason names the checks; the admission of the
    same generation (every check Ready) clears it, and the start runs it."""
    model = Model()
    reserved = msgspec.structs.replace(
        admitted("a"), id="reserved", reserved_only=True, admission_checks=["budget"]
    )
    feed(model, [submitted("a"), reserved])
    row = model.workloads.rows[("team-a", "a")]
    assert row.status == "Admitted" and "waiting for admission checks: budget" in row.reason
    feed(model, [admitted("a"), started("a")])
    assert (row.status, row.reason) == ("Running", "")


def _research(share: int | None) -> list[dict[str, object]]:
    """Admission's Cohort object `research`; ``share``: its weightedShare (None: fair
    sharing off, no fairSharing in its status)."""
    status = {} if share is None else {"fairSharing": {"weightedShare": share}}
    return [{"metadata": {"name": "research"}, "spec": {}, "status": status}]


async def test_the_overview_heads_a_cohort_with_its_weighted_share() -> None:
    """A Cohort object's status.fairSharing.weightedShare is in its heading, and a change of
    it alone (no ClusterQueue moved) rebuilds the page; without fair sharing, no share."""
    from berth_console.pages.overview import OverviewView

    queues = [cluster_queue("cq", cohort="research")]
    model = Model()
    model.set_queues(queues, [], _research(None))
    view = OverviewView(Context(model=model, queries=None, pending=PendingCache(None)))
    off = await view.current()
    assert "Cohort research<" in view.body(off) and "weighted share" not in view.body(off)
    model.set_queues(queues, [], _research(250))
    on = await view.current()
    assert on.structure != off.structure
    assert "Cohort research · weighted share 250<" in view.body(on)
