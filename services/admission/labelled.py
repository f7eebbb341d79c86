"""Labelled Prometheus children kept by their label values, for the admission hot path.

``metric.labels(...)`` checks its arguments, stringifies them and takes the metric's lock on
every call; admission counts several series per admission and per pods-ready report, so at
tens of thousands of workloads that was a tenth of its CPU. A child, once made, is the same
object for as long as the metric holds it, so :class:`Children` keeps it and hands it back.
The metric still holds every series it ever had: keeping or dropping a child here changes
no sample, only whether the next call looks it up again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Self, TypeVar, cast

__all__ = ["Children"]


class _Labelled(Protocol):
    def labels(self, *values: str) -> Self: ...


M = TypeVar("M", bound=_Labelled)


class Children:
    """Children of labelled metrics by (metric, label values), made once by ``labels()``."""

    def __init__(self) -> None:
        self._kept: dict[tuple[object, tuple[str, ...]], Any] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def of(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)`` (values in the metric's label order), kept."""
        key = (metric, values)
        child = self._kept.get(key)
        if child is None:
            child = self._kept[key] = metric.labels(*values)
        return cast(M, child)

    def forget(self, gone: Callable[[object, tuple[str, ...]], bool]) -> None:
        """Drop the kept children for which ``gone(metric, values)`` holds (their queue was
        deleted): the next call for them asks the metric again."""
        for key in [key for key in self._kept if gone(*key)]:
            del self._kept[key]
