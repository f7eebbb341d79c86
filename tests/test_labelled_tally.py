"""Tallies of light metrics (services/admission/labelled.py): held additions counted as
each child's inc() and observe() would, in order, shared or not."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.admission import labelled
from services.admission.labelled import EXACT, LightCounter, LightHistogram, Tally, counted_up
from tests.labelled_samples import HISTOGRAM_CASES, _names, _samples


def _tallied(amounts: list[float], *, tally: bool) -> list[list[tuple[Any, ...]]]:
    """The samples of two counters and two histograms (one list of buckets) whose children
    count each amount: through one Tally, or through inc() and observe() one by one."""
    registry = CollectorRegistry()
    counters = [LightCounter(f"t_{next(_names)}", "c", ["q"], registry=registry) for _ in "ab"]
    histograms = [
        LightHistogram(
            f"t_{next(_names)}", "h", ["q"], buckets=(0.1, 0.25, 1.0, 2.5), registry=registry
        )
        for _ in "ab"
    ]
    counts, waits = [c.labels("a") for c in counters], [h.labels("a") for h in histograms]
    together = Tally(counts, waits)
    for amount in amounts:
        if tally:
            together.add(amount)
        else:
            for counter in counts:
                counter.inc()
            for histogram in waits:
                histogram.observe(amount)
    return [_samples(c) for c in counters] + [_samples(h) for h in histograms]


@pytest.mark.parametrize(("observed", "why"), HISTOGRAM_CASES, ids=[c[1] for c in HISTOGRAM_CASES])
def test_a_tally_serves_what_inc_and_observe_serve(observed: list[float], why: str) -> None:
    """Every sample (counts, buckets, sums) as each child's inc() and observe() made them."""
    assert repr(_tallied(observed, tally=True)) == repr(_tallied(observed, tally=False)), why


# (the histograms' buckets, what is given as the counter, the error, why)
TALLY_REFUSALS = [
    ((0.1, 1.0), "child", "one list of buckets", "histograms with other buckets"),
    ((0.1, 0.25, 1.0, 2.5), "parent", "missing label values", "a labelled parent, as inc()"),
    (
        (0.1, 0.25, 1.0, 2.5),
        "unlabelled",
        "missing label values",
        "a metric without labels: counts a tally held for it would never be served",
    ),
]


@pytest.mark.parametrize(
    ("buckets", "given", "error", "why"), TALLY_REFUSALS, ids=[c[3] for c in TALLY_REFUSALS]
)
def test_a_tally_refuses(buckets: tuple[float, ...], given: str, error: str, why: str) -> None:
    registry = CollectorRegistry()
    counter = LightCounter(f"t_{next(_names)}", "c", ["q"], registry=registry)
    unlabelled = LightCounter(f"t_{next(_names)}", "c", registry=registry)
    one, other = (
        LightHistogram(f"t_{next(_names)}", "h", ["q"], buckets=b, registry=registry)
        for b in ((0.1, 0.25, 1.0, 2.5), buckets)
    )
    counted = {"child": counter.labels("a"), "parent": counter, "unlabelled": unlabelled}[given]
    with pytest.raises(ValueError, match=error):
        Tally([counted], [one.labels("a"), other.labels("a")])


Step = tuple[str, float]  # ("tally" | "observe" | "inc" | "read", amount)
BIG = 1e16  # 1.0 added to it is lost: the sums show the order of the additions
# (steps on one tally of a counter and a histogram, and the same children directly; why)
HELD_CASES: list[tuple[list[Step], str]] = [
    ([("tally", BIG), ("observe", 1.0), ("observe", 1.0)], "a direct observe after held adds"),
    ([("tally", BIG), ("inc", 1.0), ("observe", 1.0)], "a direct inc after held adds"),
    (
        [("tally", 1.0), ("tally", 1.0), ("inc", BIG)],
        "a direct inc of a big amount after held counts: 2 then BIG, not BIG then 1s lost",
    ),
    ([("observe", 1.0), ("tally", 1.0), ("tally", BIG)], "held adds after direct ones"),
    ([("tally", BIG), ("read", 0), ("tally", 1.0), ("observe", 1.0)], "a read between: done"),
    ([("tally", 0.2)] * 3000 + [("observe", 5.0)], "many adds, then a direct observe"),
    (
        [("tally", 0.2)] * 5 + [("tally", 2.0)] * 3 + [("read", 0)],
        "several adds of one tally, two buckets and none: counted in bulk, the same",
    ),
    (
        [("inc", BIG), ("tally", 1.0), ("tally", 1.0), ("read", 0)],
        "held counts on a count past 2**53: not in bulk (BIG + 2), one by one as inc() loses them",
    ),
    (
        [("inc", 0.5), ("tally", 1.0), ("tally", 1.0), ("inc", 0.25), ("tally", 1.0)],
        "a count not whole (a counter's own inc(0.5)): not in bulk",
    ),
    (
        [("tally", 0.2)] * 3000 + [("read", 0)],
        "many adds: the counts kept on the tally until the read",
    ),
    (
        [("tally", 1.0)] * 1500 + [("inc", BIG), ("tally", 1.0), ("read", 0)],
        "the kept counts go on before a direct inc (1500 then BIG, then 1 lost)",
    ),
]


def _held(steps: list[Step], *, tally: bool) -> list[list[tuple[Any, ...]]]:
    """The samples after ``steps``: the tally's adds through a Tally (held), or each as its
    counter's inc() and histogram's observe() at once (the reference)."""
    registry = CollectorRegistry()
    counter = LightCounter(f"h_{next(_names)}", "c", ["q"], registry=registry)
    histogram = LightHistogram(f"h_{next(_names)}", "h", ["q"], buckets=(1.0,), registry=registry)
    count, wait = counter.labels("a"), histogram.labels("a")
    together = Tally([count], [wait])
    seen = []
    for step, amount in steps:
        if step == "tally" and tally:
            together.add(amount)
        elif step == "tally":
            count.inc()
            wait.observe(amount)
        elif step == "observe":
            wait.observe(amount)
        elif step == "inc":
            count.inc(amount)
        else:
            seen.append(_samples(histogram))
    return [*seen, _samples(counter), _samples(histogram)]


@pytest.mark.parametrize(("steps", "why"), HELD_CASES, ids=[c[1] for c in HELD_CASES])
def test_held_additions_are_done_in_order(steps: list[Step], why: str) -> None:
    """A tally's held additions are done before any other count or read of its children:
    every sum and count as if each had been done at once."""
    assert repr(_held(steps, tally=True)) == repr(_held(steps, tally=False)), why


# (count, times, expected, why)
COUNTED_UP_CASES = [
    (3.0, 4, 7.0, "whole and small: at once"),
    (EXACT - 2, 2, EXACT, "up to 2**53 exactly: at once"),
    (EXACT, 2, EXACT, "past 2**53 each 1 is lost: one by one, not 2**53 + 2"),
    (1e16, 3, 1e16, "far past 2**53: one by one"),
    (0.5, 3, 3.5, "not whole: one by one"),
    (math.inf, 2, math.inf, "infinite: one by one"),
    (2.0, 0, 2.0, "nothing to add"),
]


@pytest.mark.parametrize(
    ("count", "times", "expected", "why"), COUNTED_UP_CASES, ids=[c[3] for c in COUNTED_UP_CASES]
)
def test_counted_up_adds_ones_as_one_by_one(
    count: float, times: int, expected: float, why: str
) -> None:
    one_by_one = count
    for _ in range(times):
        one_by_one += 1
    assert repr(counted_up(count, times)) == repr(one_by_one) == repr(expected), why


# (the order of additions by tally: "cq" counts in the ClusterQueue's and its own LocalQueue's
# series, "other" in the ClusterQueue's and another LocalQueue's; the amount; why)
SHARED_CASES: list[tuple[list[tuple[str, float]], str]] = [
    ([("cq", BIG), ("other", 1.0), ("cq", 1.0)], "a shared child's sum: in the order made"),
    (
        [("cq", 1.0), ("cq", 1.0), ("other", BIG), ("other", 1.0), ("cq", BIG)],
        "a shared child's sum: either tally's additions first would differ",
    ),
    ([("other", 1.0), ("cq", 1.0), ("cq", BIG), ("other", 0.2)], "two tallies interleaved"),
    ([("cq", 0.2)] * 4 + [("other", 0.2)] * 2, "one bucket from two tallies: counts added up"),
]


def _shared(steps: list[tuple[str, float]], *, tally: bool) -> list[list[tuple[Any, ...]]]:
    """Two tallies sharing the ClusterQueue's counter and histogram (two LocalQueues of
    one ClusterQueue), held and flushed at once, or each child counted at once."""
    registry = CollectorRegistry()
    counter = LightCounter(f"s_{next(_names)}", "c", ["q"], registry=registry)
    histogram = LightHistogram(f"s_{next(_names)}", "h", ["q"], buckets=(1.0,), registry=registry)
    children = {
        name: ([counter.labels("cq"), counter.labels(name)], [histogram.labels("cq")])
        for name in ("cq", "other")
    }
    children["other"][1].append(histogram.labels("other"))
    tallies = {name: Tally(*pair) for name, pair in children.items()}
    for name, amount in steps:
        if tally:
            tallies[name].add(amount)
            continue
        for child in children[name][0]:
            child.inc()
        for wait in children[name][1]:
            wait.observe(amount)
    return [_samples(counter), _samples(histogram)]


@pytest.mark.parametrize(("steps", "why"), SHARED_CASES, ids=[c[1] for c in SHARED_CASES])
def test_tallies_sharing_a_child_count_as_each_at_once(
    steps: list[tuple[str, float]], why: str
) -> None:
    assert repr(_shared(steps, tally=True)) == repr(_shared(steps, tally=False)), why


def test_a_child_in_no_tally_is_counted_without_adding_the_kept_counts() -> None:
    """inc() and observe() on a child of no tally leave a tally's counts kept (nothing of
    that child is among them); a child of a tally has them added first."""
    registry = CollectorRegistry()
    counter = LightCounter(f"n_{next(_names)}", "c", ["q"], registry=registry)
    histogram = LightHistogram(f"n_{next(_names)}", "h", ["q"], buckets=(1.0,), registry=registry)
    labelled.flush()
    tally = Tally([counter.labels("in")], [histogram.labels("in")])
    tally.add(0.5)
    counter.labels("out").inc()
    histogram.labels("out").observe(0.5)
    assert labelled._UNCOUNTED == [tally], "a child of no tally: the counts stay kept"
    counter.labels("in").inc()
    assert labelled._UNCOUNTED == [], "a child of the tally: the counts are added first"
    samples = next(iter(counter.collect())).samples
    assert [s.value for s in samples if s.name.endswith("_total")] == [2.0, 1.0], "in, out"
