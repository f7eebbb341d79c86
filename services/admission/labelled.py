"""Labelled Prometheus children kept by their label values, and lighter histogram children,
for the admission hot path.

``metric.labels(...)`` checks its arguments, stringifies them and takes the metric's lock on
every call; admission counts several series per admission and per pods-ready report, so the
calls add up to a share of its CPU that grows with the workloads. A child, once made, is the same
object for as long as the metric holds it, so :class:`Children` keeps it and hands it back;
the children one count touches together (an admission's four series of its ClusterQueue and
LocalQueue) are kept as one group, found with one look-up. The metric still holds every
series it ever had: keeping or dropping a child or a group here changes no sample, only
whether the next call looks it up again.

A counter child of prometheus_client takes a lock on every increment; a :class:`LightCounter`'s
child (:class:`CounterChild`) adds to a plain float (one thread, as below); its samples are
the same.

A tally (:class:`Tally`, an admission's eight series) adds each amount to its histograms'
sums at once, in the order made (float additions: another order could change a sum); the
counts (a counter's one per addition, a bucket's) are whole numbers, kept on the tally and
added to its children in bulk (:func:`flush`) before anything reads a light child or counts
one of a tally otherwise (a child in no tally is counted at once: nothing of it is kept):
exact in any order (:func:`counted_up`), so every sample is the same as if each child had
counted each addition itself, without touching four counters and four bucket lists per
addition.

A histogram child of prometheus_client holds a lock and a float object per bucket, and makes
them (with each bucket's text) when first labelled, which is slow for a thousand
ClusterQueues and LocalQueues with eight wait-time histograms each; and every observation
takes a lock and walks the buckets. A :class:`LightHistogram`'s child
(:class:`HistogramChild`) keeps a plain list of counts and finds the bucket by bisection; its
samples are the same. Admission counts and serves metrics on one thread (the event loop), so
no lock is needed.

prometheus_client makes each child a whole metric object: its settings, a dict of them and
(a histogram's) its own copy of the bucket bounds, for every series of every queue.
The light metrics' children are plain objects with slots that read their metric's one list
of bounds (``labels()`` makes them, with prometheus_client's checks); the parent collects
their samples as it collects its own children's.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast

from prometheus_client import Counter, Histogram
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = [
    "EXACT",
    "Children",
    "CounterChild",
    "HistogramChild",
    "LightCounter",
    "LightHistogram",
    "Tally",
    "counted_up",
    "flush",
]

# Tallies whose counts are not yet on their children (Tally._times), each once.
_UNCOUNTED: list[Tally] = []


K = TypeVar("K", covariant=True)


class _Labelled(Protocol[K]):
    def labels(self, *values: str) -> K: ...


G = TypeVar("G")


class Children:
    """Children of labelled metrics by (metric, label values), made once by ``labels()``."""

    def __init__(self) -> None:
        self._kept: dict[tuple[object, tuple[str, ...]], Any] = {}
        # make -> its args -> the group: ``make`` hashed by identity, the args (label values)
        # by their cached str hashes (a key holding metric objects hashed each of them).
        self._groups: dict[Callable[..., Any], dict[tuple[Hashable, ...], Any]] = {}

    def __len__(self) -> int:
        """The children kept (groups are only shortcuts to them)."""
        return len(self._kept)

    def of(self, metric: _Labelled[K], *values: str) -> K:
        """``metric.labels(*values)`` (values in the metric's label order), kept."""
        key = (metric, values)
        child = self._kept.get(key)
        if child is None:
            child = self._kept[key] = metric.labels(*values)
        return cast(K, child)

    def group(self, make: Callable[..., G], *args: Hashable) -> G:
        """``make(*args)`` (children made with :meth:`of`), kept by ``make`` and ``args``."""
        made = self._groups.get(make)
        if made is None:
            made = self._groups[make] = {}
        found = made.get(args)
        if found is None:
            found = made[args] = make(*args)
        return cast(G, found)

    def forget(self, gone: Callable[[object, tuple[str, ...]], bool]) -> None:
        """Drop the kept children for which ``gone(metric, values)`` holds (their queue was
        deleted): the next call for them asks the metric again. Every group is dropped (a
        queue's deletion is rare; each is made again from the children on its next use)."""
        for key in [key for key in self._kept if gone(*key)]:
            del self._kept[key]
        self._groups.clear()


class _LightChild:
    """What every light child keeps besides its counts: when it was made, and whether a
    tally may hold counts for it (:func:`flush`). A plain object with slots, not a metric:
    prometheus_client makes each child a whole metric (a dict of its settings, its own copy
    of the histogram's buckets), for every series of every queue. Its parent adds its labels
    when it collects it (``_multi_samples`` calls :meth:`_samples`)."""

    __slots__ = ("_created", "_tallied")

    def __init__(self) -> None:
        self._created = time.time()
        self._tallied = False

    def _samples(self) -> Iterable[Sample]:
        raise NotImplementedError


class CounterChild(_LightChild):
    """A :class:`LightCounter`'s series: adds to a float (one thread only)."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        super().__init__()
        self._count = 0.0

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        """Add ``amount``, refused as by Counter when negative; exemplars are not kept."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        if self._tallied and _UNCOUNTED:
            flush()
        self._count += amount

    def reset(self) -> None:
        flush()
        self._count = 0.0
        self._created = time.time()

    def _samples(self) -> Iterable[Sample]:
        flush()
        sample = Sample("_total", {}, self._count, None, None)
        if prometheus_metrics._use_created:
            return (sample, Sample("_created", {}, self._created, None, None))
        return (sample,)


class HistogramChild(_LightChild):
    """A :class:`LightHistogram`'s series: counts in a list, the bucket found by bisection
    (one thread only); the bucket bounds are its metric's list, shared by every series."""

    __slots__ = ("_counts", "_total", "_upper_bounds")

    def __init__(self, bounds: list[float]) -> None:
        super().__init__()
        self._upper_bounds = bounds
        self._counts = [0.0] * len(bounds)
        self._total = 0.0

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        """Count ``amount`` in the first bucket whose bound is at least it, as Histogram does
        (a NaN in none, its sum NaN); exemplars are not kept."""
        if self._tallied and _UNCOUNTED:
            flush()
        bounds = self._upper_bounds
        index = bisect_left(bounds, amount)
        self._total += amount
        if index < len(bounds) and amount <= bounds[index]:
            self._counts[index] += 1

    def _samples(self) -> Iterable[Sample]:
        flush()
        samples = []
        acc = 0.0
        for bound, count in zip(self._upper_bounds, self._counts, strict=True):
            acc += count
            le = floatToGoString(bound)  # type: ignore[no-untyped-call]
            samples.append(Sample("_bucket", {"le": le}, acc, None, None))
        samples.append(Sample("_count", {}, acc, None, None))
        if self._upper_bounds[0] >= 0:
            samples.append(Sample("_sum", {}, self._total, None, None))
        if prometheus_metrics._use_created:
            samples.append(Sample("_created", {}, self._created, None, None))
        return tuple(samples)


C = TypeVar("C", bound=_LightChild)


def _labelled_child(
    metric: Counter | Histogram,
    values: tuple[object, ...],
    keywords: dict[str, object],
    make: Callable[[], C],
) -> C:
    """``metric.labels(*values, **keywords)``, checked as prometheus_client checks it, whose
    child (made once per label values, kept by the metric) is ``make()``."""
    names = metric._labelnames
    if not names:
        raise ValueError(f"No label names were set when constructing {metric}")
    if values and keywords:
        raise ValueError("Can't pass both *args and **kwargs")
    if keywords:
        if sorted(keywords) != sorted(names):
            raise ValueError("Incorrect label names")
        values = tuple(keywords[name] for name in names)
    elif len(values) != len(names):
        raise ValueError("Incorrect label count")
    key = tuple(str(value) for value in values)
    children = cast(dict[tuple[str, ...], C], metric._metrics)
    with metric._lock:
        child = children.get(key)
        if child is None:
            child = children[key] = make()
    return child


class LightCounter(Counter):
    """prometheus_client's Counter whose series are :class:`CounterChild` (one thread only);
    its samples are the same. Without labels it counts on a child of its own."""

    def labels(self, *values: object, **keywords: object) -> CounterChild:  # type: ignore[override]
        return _labelled_child(self, values, keywords, CounterChild)

    def _metric_init(self) -> None:
        self._own = CounterChild()

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        """As Counter.inc: refused on the labelled parent."""
        self._raise_if_not_observable()  # type: ignore[no-untyped-call]
        self._own.inc(amount)

    def reset(self) -> None:
        self._raise_if_not_observable()  # type: ignore[no-untyped-call]
        self._own.reset()

    def _child_samples(self) -> Iterable[Sample]:
        return self._own._samples()


class LightHistogram(Histogram):
    """prometheus_client's Histogram whose series are :class:`HistogramChild` (one thread
    only); its samples are the same. Without labels it counts on a child of its own."""

    def labels(self, *values: object, **keywords: object) -> HistogramChild:  # type: ignore[override]
        bounds = self._upper_bounds
        return _labelled_child(self, values, keywords, lambda: HistogramChild(bounds))

    def _metric_init(self) -> None:
        self._own = HistogramChild(self._upper_bounds)

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        """As Histogram.observe: refused on the labelled parent."""
        self._raise_if_not_observable()  # type: ignore[no-untyped-call]
        self._own.observe(amount)

    def _child_samples(self) -> Iterable[Sample]:
        return self._own._samples()


class Tally:
    """Light children counted together by one call (an admission's count and wait, per
    ClusterQueue and per LocalQueue): :meth:`add` is each counter's ``inc()`` and each
    histogram's ``observe(amount)``, the bucket found once for all (their buckets are one
    list: any other is refused here); the samples are the same. The sums are added at
    once, the counts kept until :func:`flush` (the module's docstring)."""

    __slots__ = ("_bounds", "_counters", "_histograms", "_in_buckets", "_times")

    def __init__(self, counters: Sequence[CounterChild], histograms: Sequence[HistogramChild]):
        for child in (*counters, *histograms):
            if not isinstance(child, _LightChild):  # a metric, labelled or not: not a series
                raise ValueError(
                    f"a tally counts a light metric's series (its labels()), not {child}: the"
                    " metric is missing label values"
                )
        if len({tuple(h._upper_bounds) for h in histograms}) > 1:
            raise ValueError("the histograms of a tally have one list of buckets")
        self._counters = tuple(counters)
        self._histograms = tuple(histograms)
        tallied: Sequence[_LightChild] = (*counters, *histograms)
        for child in tallied:
            child._tallied = True
        self._bounds: list[float] = histograms[0]._upper_bounds if histograms else []
        # Additions done but not yet counted on the children: in all, and per bucket.
        self._times = 0
        self._in_buckets = [0] * len(self._bounds)

    def add(self, amount: float) -> None:
        """Count ``amount``: each histogram's sum at once, the counts kept (:func:`flush`)."""
        for histogram in self._histograms:
            histogram._total += amount
        if not self._times:
            _UNCOUNTED.append(self)
        self._times += 1
        bounds = self._bounds
        index = bisect_left(bounds, amount)
        if index < len(bounds) and amount <= bounds[index]:  # a NaN in none
            self._in_buckets[index] += 1


def flush() -> None:
    """Add the tallies' kept counts to their children: before a light child is read (its
    samples) or a child of a tally is counted otherwise (``inc``, ``observe``, ``reset``),
    so each child shows the same as if each addition had been counted on it at once."""
    if not _UNCOUNTED:
        return
    tallies = _UNCOUNTED.copy()
    _UNCOUNTED.clear()
    for tally in tallies:
        times, in_buckets = tally._times, tally._in_buckets
        tally._times = 0
        tally._in_buckets = [0] * len(in_buckets)
        for counter in tally._counters:
            counter._count = counted_up(counter._count, times)
        for index, counted in enumerate(in_buckets):
            if counted:
                for histogram in tally._histograms:
                    counts = histogram._counts
                    counts[index] = counted_up(counts[index], counted)


EXACT = float(2**53)  # up to here every whole number is a float: adding 1 is exact


def counted_up(count: float, times: int) -> float:
    """``count`` with 1 added ``times`` times, one by one: at once (``count + times``) when
    that is the same, ``count`` whole and ``count + times`` at most :data:`EXACT` (so every
    sum on the way is exact); else one by one (a count past 2**53, where a 1 can be lost,
    or a counter's own ``inc(0.5)``, where rounding could differ)."""
    if count.is_integer() and count + times <= EXACT:
        return count + times
    for _ in range(times):
        count += 1
    return count
