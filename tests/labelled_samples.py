"""What the tests of admission's kept metric children (services/admission/labelled.py)
share: fresh metric names, a metric's samples as compared, and observations to compare."""

from __future__ import annotations

import itertools
import math
from typing import Any

from prometheus_client import Counter, Histogram

_names = itertools.count()


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
