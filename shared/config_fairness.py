"""Configuration of admission fair sharing (Kueue's KEP 4136), apart from shared/config.py.

- ``ClusterQueue.spec.admissionScope.admissionMode``: ``UsageBasedAdmissionFairSharing`` orders
  the ClusterQueue's workloads across its LocalQueues by what each LocalQueue has consumed
  lately; ``NoAdmissionFairSharing`` (Kueue's other value) keeps the usual order.
- ``LocalQueue.spec.fairSharing.weight``: the LocalQueue's consumption is divided by it.
- ``Configuration.spec.admissionFairSharing`` (Kueue's Configuration ``admissionFairSharing``):
  ``usageHalfLifeTime`` (required: consumed usage halves in that time; 0 forgets it at once),
  ``usageSamplingInterval`` (default 5m: how often consumption is sampled) and
  ``resourceWeights`` (resource name -> weight, default 1).

Every value is checked at ``berth apply`` time; an error names the field.
"""

from __future__ import annotations

from typing import Any, Literal

from shared.config_base import Spec
from shared.durations import parse_duration
from shared.quantities import QuantityError, parse_quantity

__all__ = [
    "AdmissionFairSharingSettings",
    "AdmissionScope",
    "check_fairness",
]

AdmissionMode = Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"]


class AdmissionScope(Spec):
    admission_mode: AdmissionMode


class AdmissionFairSharingSettings(Spec):
    usage_half_life_time: str
    usage_sampling_interval: str = "5m"
    resource_weights: dict[str, float] = {}

    @property
    def half_life(self) -> float:
        """usageHalfLifeTime in seconds."""
        return parse_duration(self.usage_half_life_time)

    @property
    def sampling_interval(self) -> float:
        """usageSamplingInterval in seconds."""
        return parse_duration(self.usage_sampling_interval)


def check_fairness(obj: Any, *, where: str) -> None:
    """Raise ValueError naming the field: a LocalQueue's ``spec.fairSharing.weight`` must be a
    quantity, not negative (0 is allowed, as in Kueue); a Configuration's
    ``spec.admissionFairSharing`` needs durations that parse, a sampling interval above 0 and
    resource weights that are not negative. (Duck-typed: shared/config.py imports this.)"""
    kind = type(obj).__name__
    if kind == "LocalQueue" and obj.spec.fair_sharing is not None:
        try:
            parse_quantity(obj.spec.fair_sharing.weight)
        except QuantityError as error:
            raise ValueError(f"{where}: `spec.fairSharing.weight`: {error}") from error
    if kind == "Configuration" and obj.spec.admission_fair_sharing is not None:
        _check_settings(obj.spec.admission_fair_sharing, where)


def _check_settings(settings: AdmissionFairSharingSettings, where: str) -> None:
    path = f"{where}: `spec.admissionFairSharing"
    for name, text in (
        ("usageHalfLifeTime", settings.usage_half_life_time),
        ("usageSamplingInterval", settings.usage_sampling_interval),
    ):
        try:
            parse_duration(text)
        except ValueError as error:
            raise ValueError(f"{path}.{name}`: {error}") from error
    if settings.sampling_interval <= 0:
        raise ValueError(f"{path}.usageSamplingInterval` must be more than 0")
    for resource, weight in settings.resource_weights.items():
        if weight < 0:
            raise ValueError(f"{path}.resourceWeights.{resource}` must not be negative")
