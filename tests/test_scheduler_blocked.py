"""A blocked head presumed to block its queue again as a pass starts (assigning.py:
``_stays_blocked``; presumed.py: ``Presumed.block``), and taken back when an admission under
its root comes before its turn. Every case runs against a scheduler that tries every head in
its turn (no offers, so no shortcut): the decisions and the queues must be the same; the
count says that the shortcut applied, or did not, where the case says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from services.admission.scheduler import Inadmissible, Scheduler
from shared.config import ConfigObject
from tests.test_scheduler import config as parse
from tests.test_scheduler import cq, flavor, group, lq, ref, wl
from tests.test_scheduler_offers import Step, apply

OD = "on-demand"


def world() -> list[ConfigObject]:
    """a (BestEffortFIFO) and s (StrictFIFO), 4 cpu and 4Gi each, in cohort co."""
    quota = {"cpu": 4, "memory": "4Gi"}
    return parse(
        flavor(OD),
        cq("a", group(["cpu", "memory"], (OD, quota)), cohort="co"),
        cq("s", group(["cpu", "memory"], (OD, quota)), cohort="co", queueingStrategy="StrictFIFO"),
        lq("qa", "a"),
        lq("qs", "s"),
    )


# The cohort's memory is full (am, am2, sm); its cpu has 2 free in a (a1 uses 2).
RUNNING = [
    wl("a1", "qa", cpu=2),
    wl("am", "qa", memory="3Gi"),
    wl("am2", "qa", memory="1Gi"),
    wl("sm", "qs", memory="4Gi"),
]
# s's head: 1 cpu (the cohort's free cpu, read capped at that, stays at it) and 3Gi (3Gi more
# needed than the cohort has): it blocks s.
HEAD = wl("h", "qs", t=5, cpu=1, memory="3Gi")


@dataclass
class Case:
    reason: str
    change: list[Step]  # between the second pass (h blocks s) and the third
    kept_blocked: int  # heads the third pass presumed blocked, and not taken back
    decided: list[str]  # the third pass's decisions (workloads)


CASES = [
    Case(
        "cpu freed in the cohort (a1), h reads the same (cpu capped at its 1): s stays blocked"
        " without h entering the heap",
        [("finish", "a1")],
        1,
        [],
    ),
    Case(
        "memory freed (am2, 1Gi): h reads otherwise (2Gi more needed): tried in its turn,"
        " with a new message",
        [("finish", "am2")],
        0,
        ["h"],
    ),
    Case(
        "h's failure at this reading is remembered, but with another message than h has (h0,"
        " of its shape and before it, failed at this reading and left): h is tried in its"
        " turn, its new message its decision",
        [
            ("submit", wl("h0", "qs", t=0, cpu=1, memory="3Gi", priority=100)),
            ("finish", "am2"),
            ("schedule", None),
            ("delete", "h0"),
        ],
        0,
        ["h"],
    ),
    Case(
        "memory freed (am): h fits now: tried, admitted",
        [("finish", "am")],
        0,
        ["h"],
    ),
    Case(
        "an admission under its root before its turn (a2, queued earlier): taken back, s"
        " unblocked and h tried in its turn (it fails as before: no decision)",
        [("finish", "a1"), ("submit", wl("a2", "qa", t=1, cpu=1))],
        0,
        ["a2"],
    ),
    Case(
        "an admission under its root after its turn (a3, queued later): the presumption stands",
        [("finish", "a1"), ("submit", wl("a3", "qa", t=9, cpu=1))],
        1,
        ["a3"],
    ),
]


def run(case: Case, offers: bool) -> tuple[list[list[Any]], list[Any], int]:
    s = Scheduler()
    s.offers = offers
    s.set_config(world())
    passes = []
    for running in RUNNING:
        s.submit(running)
    passes.append(s.schedule())
    s.submit(HEAD)
    passes.append(s.schedule())
    for step in case.change:
        if step[0] == "delete":
            s.delete(ref(step[1]))
        else:
            apply(s, step)
    passes.append(s.schedule())
    return passes, [s.workload_views(), s.queue_stats(), s.tried], s.kept_blocked


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason[:60])
def test_blocked_heads(case: Case) -> None:
    passes, views, kept = run(case, offers=True)
    assert [type(d) for d in passes[1]] == [Inadmissible], "h blocks s: else no case"
    assert (passes, views) == run(case, offers=False)[:2], case.reason
    assert kept == case.kept_blocked, case.reason
    assert [d.ref.name for d in passes[-1]] == case.decided, case.reason
