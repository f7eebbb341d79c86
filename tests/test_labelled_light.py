"""The light metrics (services/admission/labelled.py): their samples, labels and refusals
exactly as prometheus_client's Counter and Histogram."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from services.admission.labelled import LightCounter, LightHistogram
from tests.labelled_samples import HISTOGRAM_CASES, _names, _samples


def _histogram_samples(kind: type[Histogram], observed: list[float]) -> list[tuple[Any, ...]]:
    buckets = (0.1, 0.25, 1.0, 2.5)
    metric = kind(
        f"h_{next(_names)}", "h", ["queue"], buckets=buckets, registry=CollectorRegistry()
    )
    for amount in observed:
        metric.labels("a").observe(amount)
    return _samples(metric)


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
    metric = LightHistogram(
        "h_shared", "h", ["q"], buckets=(0.5, 1.0), registry=CollectorRegistry()
    )
    first, second = metric.labels("a"), metric.labels("b")
    assert first._upper_bounds is second._upper_bounds is metric._upper_bounds
    assert first._counts is not second._counts


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
