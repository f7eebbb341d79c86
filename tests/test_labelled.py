"""Admission's kept metric children (services/admission/labelled.py): the same series as
``labels()`` every time, and asked of the metric again once their queue is forgotten."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from services.admission import labelled, metrics
from services.admission.labelled import (
    EXACT,
    Children,
    LightCounter,
    LightHistogram,
    Tally,
    counted_up,
)

_names = itertools.count()


def _counter() -> Counter:
    return Counter(
        f"kept_{next(_names)}", "a test counter", ["queue"], registry=CollectorRegistry()
    )


# (first call's values, second call's values, same metric, the same child expected, why)
KEEP_CASES = [
    (("a",), ("a",), True, True, "same metric and values: the kept child"),
    (("a",), ("b",), True, False, "changed values: another series, not the kept child"),
    (("a",), ("a",), False, False, "another metric with the same values: its own child"),
]


@pytest.mark.parametrize(
    ("first", "second", "same_metric", "same_child", "reason"),
    KEEP_CASES,
    ids=[c[4] for c in KEEP_CASES],
)
def test_kept_child(
    first: tuple[str, ...],
    second: tuple[str, ...],
    same_metric: bool,
    same_child: bool,
    reason: str,
) -> None:
    """A child is reused only for the same metric and the same label values."""
    kept = Children()
    one = _counter()
    other = one if same_metric else _counter()
    a, b = kept.of(one, *first), kept.of(other, *second)
    assert (a is b) == same_child, reason
    assert a is one.labels(*first) and b is other.labels(*second), reason


# (series the metric dropped, queues forgotten, the count the metric serves after, why)
FORGET_CASES = [
    (False, set(), 2.0, "nothing dropped or forgotten: the kept child counts on"),
    (True, {"a"}, 1.0, "queue deleted: forgotten, so the new series gets the count"),
    (
        True,
        {"b"},
        None,
        "another queue forgotten: the kept child is used, the dropped series not made again",
    ),
]


@pytest.mark.parametrize(
    ("dropped", "forgotten", "served", "reason"), FORGET_CASES, ids=[c[3] for c in FORGET_CASES]
)
def test_forget(dropped: bool, forgotten: set[str], served: float | None, reason: str) -> None:
    """After ``forget``, a child is asked of the metric again (here the metric had dropped
    its series, which only a fresh ``labels()`` brings back); others stay kept."""
    kept, counter = Children(), _counter()
    kept.of(counter, "a").inc()
    if dropped:
        counter.remove("a")
    kept.forget(lambda metric, values: metric is counter and values[0] in forgotten)
    kept.of(counter, "a").inc()
    samples = {
        s.labels["queue"]: s.value
        for m in counter.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert samples.get("a") == served, reason
    assert len(kept) == 1, reason


def _value(sample: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(sample, labels) or 0.0


def test_metrics_count_what_labels_counted() -> None:
    """Admission's counting functions serve the series and values ``labels()`` gave them:
    per ClusterQueue, per LocalQueue (name, namespace), one bucket per observation."""
    cq, lq, ns = "kept-cq", "kept-lq", "kept-ns"
    for waited in (0.2, 3.0):
        metrics.admitted(cluster_queue=cq, namespace=ns, local_queue=lq, waited=waited, late=True)
    metrics.admitted(
        cluster_queue=cq, namespace=ns, local_queue=lq, waited=1.0, late=False, reserved_only=True
    )
    metrics.pods_ready(cluster_queue=cq, namespace=ns, local_queue=lq, waited=4, since_admitted=1)
    metrics.evicted(cluster_queue=cq, namespace=ns, local_queue=lq, reason="Preempted")
    by_cq, by_lq = {"cluster_queue": cq}, {"name": lq, "namespace": ns}
    assert _value("berth_quota_reserved_workloads_total", **by_cq) == 3
    assert _value("berth_admitted_workloads_total", **by_cq) == 2
    assert _value("berth_local_queue_admitted_workloads_total", **by_lq) == 2
    assert _value("berth_admission_late_total", **by_cq) == 2
    assert _value("berth_admission_wait_time_seconds_bucket", **by_cq, le="0.25") == 1
    assert _value("berth_admission_wait_time_seconds_sum", **by_cq) == pytest.approx(3.2)
    # An admission counts its reservation too; a reservation alone is no admission.
    assert _value("berth_local_queue_quota_reserved_workloads_total", **by_lq) == 3
    assert _value("berth_quota_reserved_wait_time_seconds_sum", **by_cq) == pytest.approx(4.2)
    lq_reserved_wait = "berth_local_queue_quota_reserved_wait_time_seconds_sum"
    assert _value(lq_reserved_wait, **by_lq) == pytest.approx(4.2)
    lq_admission_wait = "berth_local_queue_admission_wait_time_seconds_sum"
    assert _value(lq_admission_wait, **by_lq) == pytest.approx(3.2)
    assert _value("berth_local_queue_ready_wait_time_seconds_count", **by_lq) == 1
    assert _value("berth_evicted_workloads_total", **by_cq, reason="Preempted") == 1
    assert _value("berth_local_queue_evicted_workloads_total", **by_lq, reason="Preempted") == 1


# (ClusterQueues kept, LocalQueues kept, children left of the 4 pods-ready ones, why)
QUEUE_CASES = [
    ({"fq-cq"}, {("fq-ns", "fq-lq")}, 4, "both queues exist: every child kept"),
    (set(), {("fq-ns", "fq-lq")}, 2, "ClusterQueue deleted: its two children dropped"),
    ({"fq-cq"}, set(), 2, "LocalQueue deleted: its two children dropped"),
    ({"fq-cq"}, {("other", "fq-lq")}, 2, "same name in another namespace is another queue"),
]


@pytest.mark.parametrize(
    ("cluster_queues", "local_queues", "left", "reason"),
    QUEUE_CASES,
    ids=[c[3] for c in QUEUE_CASES],
)
def test_forget_queues(
    cluster_queues: set[str], local_queues: set[tuple[str, str]], left: int, reason: str
) -> None:
    """forget_queues drops exactly the children labelled with a queue that is gone."""
    metrics.forget_queues(set(), set())  # start from no kept children of queues
    metrics.attempt(admitted_any=True, seconds=0.1)  # no queue label: never forgotten
    others = len(metrics._KEPT)
    metrics.pods_ready(
        cluster_queue="fq-cq", namespace="fq-ns", local_queue="fq-lq", waited=1, since_admitted=1
    )
    metrics.forget_queues(cluster_queues, local_queues)
    assert len(metrics._KEPT) == others + left, reason


def test_every_kept_queue_metric_is_forgettable() -> None:
    """Each labelled metric counted per queue is in one of forget_queues' sets."""
    queue_labels = {"cluster_queue", "name"}
    for metric in vars(metrics).values():
        if isinstance(metric, Counter | Histogram) and queue_labels & set(metric._labelnames):
            assert metric in metrics._BY_CLUSTER_QUEUE | metrics._BY_LOCAL_QUEUE, metric


def _histogram_samples(kind: type[Histogram], observed: list[float]) -> list[tuple[Any, ...]]:
    buckets = (0.1, 0.25, 1.0, 2.5)
    metric = kind(
        f"h_{next(_names)}", "h", ["queue"], buckets=buckets, registry=CollectorRegistry()
    )
    for amount in observed:
        metric.labels("a").observe(amount)
    return _samples(metric)


def _samples(metric: Counter | Histogram) -> list[tuple[Any, ...]]:
    """Each sample's suffix, labels and value (a creation time only said to be there)."""
    return [
        (s.name.rsplit("_", 1)[1], s.labels, "created" if s.name.endswith("_created") else s.value)
        for family in metric.collect()
        for s in family.samples
    ]


# (observations, why)
HISTOGRAM_CASES = [
    ([], "nothing observed: every bucket 0, sum 0"),
    ([0.1, 0.25, 2.5], "a value on a bound counts in that bound's bucket"),
    ([0.0, 0.11, 0.3, 1.0, 7.0], "between bounds, and past the last one: +Inf"),
    ([-1.0], "a negative value: the first bucket"),
    ([math.inf], "+Inf: only the +Inf bucket"),
    ([math.nan, 0.2], "NaN: no bucket, its sum NaN (as Histogram)"),
]


@pytest.mark.parametrize(("observed", "why"), HISTOGRAM_CASES, ids=[c[1] for c in HISTOGRAM_CASES])
def test_light_histogram_serves_what_histogram_serves(observed: list[float], why: str) -> None:
    """Names, labels and values (the creation time aside, present) exactly as Histogram's."""
    light, reference = (_histogram_samples(k, observed) for k in (LightHistogram, Histogram))
    assert repr(light) == repr(reference), why  # repr: NaN equal to NaN


def test_light_histogram_without_its_labels_refuses() -> None:
    """Observing the labelled parent itself is refused, as by Histogram."""
    metric = LightHistogram("h_parent", "h", ["queue"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match="missing label values"):
        metric.observe(1.0)


# (label names, how labels() is called, the error prometheus_client raises, why)
LABELS_REFUSALS = [
    ((), (("a",), {}), "No label names", "a metric without labels has no children"),
    (("q", "r"), (("a",), {}), "Incorrect label count", "too few values"),
    (("q",), (("a", "b"), {}), "Incorrect label count", "too many values"),
    (("q",), ((), {"other": "a"}), "Incorrect label names", "a keyword no label has"),
    (("q",), (("a",), {"q": "a"}), "both", "values and keywords together"),
]


@pytest.mark.parametrize(
    ("names", "call", "error", "why"), LABELS_REFUSALS, ids=[c[3] for c in LABELS_REFUSALS]
)
@pytest.mark.parametrize("kinds", [(LightCounter, Counter), (LightHistogram, Histogram)])
def test_light_labels_refuses_as_prometheus_client(
    kinds: tuple[type[Any], type[Any]],
    names: tuple[str, ...],
    call: tuple[tuple[str, ...], dict[str, str]],
    error: str,
    why: str,
) -> None:
    """A light metric's ``labels()`` refuses what prometheus_client's refuses, with its
    error: the light children are made by Berth's code, its checks must not drift."""
    values, keywords = call
    for kind in kinds:
        metric = kind(f"l_{next(_names)}", "l", names, registry=CollectorRegistry())
        with pytest.raises(ValueError, match=error):
            metric.labels(*values, **keywords)


@pytest.mark.parametrize("kind", [LightCounter, LightHistogram])
def test_light_labels_by_keyword_or_value_is_one_series(kind: type[Any]) -> None:
    """Keywords in any order, values of any type (made text, as prometheus_client does):
    the same child, served once."""
    metric = kind(f"l_{next(_names)}", "l", ["q", "n"], registry=CollectorRegistry())
    child = metric.labels(n=7, q="a")
    assert metric.labels("a", "7") is child
    assert metric.labels(q="a", n="7") is child
    assert {s.labels["n"] for s in _samples_of(metric)} == {"7"}


def _samples_of(metric: Any) -> list[Any]:
    return [s for family in metric.collect() for s in family.samples]


# (what the metric without labels is given, why)
UNLABELLED_CASES = [
    ([], "nothing counted"),
    ([0.2, 3.0, 0.2], "counted on its own child"),
]


@pytest.mark.parametrize(("amounts", "why"), UNLABELLED_CASES, ids=[c[1] for c in UNLABELLED_CASES])
def test_light_metrics_without_labels_serve_what_prometheus_client_serves(
    amounts: list[float], why: str
) -> None:
    """A light metric without labels counts on a child of its own; its samples are those of
    prometheus_client's metric given the same amounts."""
    served: list[list[tuple[Any, ...]]] = []
    for kind in (LightCounter, Counter, LightHistogram, Histogram):
        metric = kind(f"u_{next(_names)}", "u", registry=CollectorRegistry())
        count = metric.inc if isinstance(metric, Counter) else metric.observe
        for amount in amounts:
            count(amount)
        suffixes = [(s.name.split("_", 2)[-1], s.labels, s.value) for s in _samples_of(metric)]
        served.append([sample for sample in suffixes if sample[0] != "created"])
    assert served[0] == served[1] and served[2] == served[3], why


def test_light_histogram_children_share_their_buckets() -> None:
    """Every series of a light histogram reads its metric's one list of bounds: a thousand
    queues' series held a thousand copies of it (the memory bench/million_pending.py
    counts), where each series needs only its counts."""
    metric = LightHistogram("h_shared", "h", ["q"], buckets=(0.5, 1.0), registry=CollectorRegistry())
    first, second = metric.labels("a"), metric.labels("b")
    assert first._upper_bounds is second._upper_bounds is metric._upper_bounds
    assert first._counts is not second._counts


# (second call's label values, forget between the calls, second call by another maker, the
# group made again, why)
GROUP_CASES = [
    (("a",), False, False, False, "same maker and values: the kept group, not made again"),
    (("b",), False, False, True, "changed values: another group"),
    (("a",), True, False, True, "a forget between: made again (its children may be gone)"),
    (("a",), False, True, True, "another maker, same values: its own group (other series)"),
]


@pytest.mark.parametrize(
    ("second", "forget", "other_maker", "made_again", "reason"),
    GROUP_CASES,
    ids=[c[4] for c in GROUP_CASES],
)
def test_group(
    second: tuple[str, ...], forget: bool, other_maker: bool, made_again: bool, reason: str
) -> None:
    """A group is kept by its maker and arguments, holds the children ``of`` gives, and is
    dropped by any ``forget``."""
    kept, counter = Children(), _counter()
    made: list[tuple[str, ...]] = []

    def make(*values: str) -> tuple[Counter]:
        made.append(values)
        return (kept.of(counter, *values),)

    def other(*values: str) -> tuple[Counter]:
        return make(*values)

    first = kept.group(make, "a")
    if forget:
        kept.forget(lambda metric, values: False)
    again = kept.group(other if other_maker else make, *second)
    assert made == [("a",), second] if made_again else [("a",)], reason
    assert (again is first) != made_again, reason
    assert again[0] is counter.labels(*second), reason


def _counter_samples(kind: type[Counter], amounts: list[float]) -> list[tuple[Any, ...]]:
    metric = kind(f"c_{next(_names)}", "c", ["queue"], registry=CollectorRegistry())
    for amount in amounts:
        metric.labels("a").inc(amount)
    return _samples(metric)


# (increments, why)
COUNTER_CASES = [
    ([], "never incremented: 0"),
    ([1, 1, 1], "ones add up"),
    ([0.5, 2, 0], "fractions and zero"),
]


@pytest.mark.parametrize(("amounts", "why"), COUNTER_CASES, ids=[c[1] for c in COUNTER_CASES])
def test_light_counter_serves_what_counter_serves(amounts: list[float], why: str) -> None:
    """Names, labels and values (the creation time aside, present) exactly as Counter's."""
    light, reference = (_counter_samples(k, amounts) for k in (LightCounter, Counter))
    assert light == reference, why


# (what is incremented, the amount, the error expected, why)
COUNTER_REFUSALS = [
    ("parent", 1.0, "missing label values", "the labelled parent itself, as Counter"),
    ("child", -1.0, "non-negative", "a negative amount, as Counter"),
]


@pytest.mark.parametrize(
    ("target", "amount", "error", "why"), COUNTER_REFUSALS, ids=[c[3] for c in COUNTER_REFUSALS]
)
def test_light_counter_refuses(target: str, amount: float, error: str, why: str) -> None:
    for kind in (LightCounter, Counter):
        metric = kind(f"c_{next(_names)}", "c", ["queue"], registry=CollectorRegistry())
        with pytest.raises(ValueError, match=error):
            (metric if target == "parent" else metric.labels("a")).inc(amount)


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


def test_counts_of_a_forgotten_queue_still_reach_its_series() -> None:
    """A tally whose queue is forgotten (its group dropped) with counts not yet on its
    children: the next read shows them all."""
    by_lq = {"name": "gone-lq", "namespace": "gone-ns"}
    before = _value("berth_local_queue_admitted_workloads_total", **by_lq)
    for _ in range(3):
        metrics.admitted(
            cluster_queue="gone-cq",
            namespace="gone-ns",
            local_queue="gone-lq",
            waited=0.3,
            late=False,
        )
    metrics.forget_queues(set(), set())
    assert _value("berth_local_queue_admitted_workloads_total", **by_lq) == before + 3
    count = _value("berth_local_queue_admission_wait_time_seconds_count", **by_lq)
    assert count == before + 3, "the wait histogram's count too (one workload each)"
