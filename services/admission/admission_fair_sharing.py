"""Admission fair sharing within a ClusterQueue (Kueue's KEP 4136, ``admissionScope``).

When a ClusterQueue sets ``admissionScope.admissionMode: UsageBasedAdmissionFairSharing`` and
the Configuration sets ``admissionFairSharing``, its pending workloads are ordered across its
LocalQueues by what each LocalQueue consumed lately: the LocalQueue with the least weighted
consumption goes first, and within it the usual order holds.

Consumption decays: each resource is an exponential moving average of what the LocalQueue's
admitted workloads use, with half-life ``usageHalfLifeTime``. Berth folds it whenever the
LocalQueue's usage changes or its value is read, with the time elapsed since the last fold,
which is exact for usage that only changes at those moments (Kueue samples every
``usageSamplingInterval`` instead). An admission also charges Kueue's entry penalty at once:
its requests times the share one sampling interval would fold in, so a burst of admissions
from one LocalQueue tilts the order before the next sample.

Surviving a restart. Kueue persists the history in each LocalQueue's
``status.fairSharing.admissionFairSharingStatus`` (``consumedResources``, ``lastUpdate``) and
reads it back. Berth rebuilds it instead, deterministically, from the event stream admission
already replays on start (and a standby folds continuously, docs/replicas.md): every
admission start and end is an event with its time, the ledger is fed at those times (the
service stops its clock at each event's time while folding), and the stream keeps every event
(no age or count limit), so the replay covers any half-life. The entry penalty is part of
that fold: it is charged by :meth:`Ledger.admitted` for every admission that starts, whether
this replica made it or learned it from the stream, at the admission's own time, so the
penalties of a burst admitted just before a restart are there after it. A bucket would be a
second copy of a fact the stream already holds, written on every admission, and could
disagree with it after a crash between the two writes.

Amounts are per resource name over every flavor, in units (cores, bytes), as Kueue's
ResourceLists are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.config_fairness import AdmissionFairSharingSettings
from shared.quota import FlavorResource

__all__ = ["Ledger", "decayed", "per_resource", "weighted_usage"]

Resources = dict[str, float]  # resource name -> amount in units


def _alpha(elapsed: float, half_life: float) -> float:
    """The share of the new value an average takes after ``elapsed`` (1 with no half-life)."""
    if half_life <= 0:
        return 1.0
    return 1.0 - math.pow(0.5, max(elapsed, 0.0) / half_life)


def decayed(
    old: Mapping[str, float], new: Mapping[str, float], elapsed: float, half_life: float
) -> Resources:
    """Kueue's CalculateDecayedConsumed: ``old * (1 - a) + new * a``, ``a`` the share
    ``elapsed`` gives the present (a half-life of 0 forgets the past at once)."""
    alpha = _alpha(elapsed, half_life)
    names = set(old) | set(new)
    return {n: old.get(n, 0.0) * (1 - alpha) + new.get(n, 0.0) * alpha for n in sorted(names)}


def weighted_usage(
    consumed: Mapping[str, float], lq_weight: float, resource_weights: Mapping[str, float]
) -> float:
    """The number LocalQueues are ordered by, lowest first (Kueue's CalculateUsage): the sum
    over resources of ``resourceWeights[r]`` (default 1) times the consumption, divided by the
    LocalQueue's ``fairSharing.weight``; +inf for a weight of 0, so it goes last."""
    total = sum(resource_weights.get(name, 1.0) * value for name, value in consumed.items())
    if lq_weight <= 0:
        return math.inf
    return total / lq_weight


def per_resource(usage: Mapping[FlavorResource, int]) -> Resources:
    """Milli-units per (flavor, resource) as units per resource name."""
    result: Resources = {}
    for (_, resource), value in usage.items():
        result[resource] = result.get(resource, 0.0) + value / 1000
    return result


@dataclass
class _Entry:
    consumed: Resources = field(default_factory=dict)
    current: Resources = field(default_factory=dict)  # what its admitted workloads use now
    since: float | None = None  # last fold
    usage: tuple[float, float, float] | None = None  # (when, weight, weighted usage) last read


class Ledger:
    """The decayed consumption of every LocalQueue (keyed by (namespace, name))."""

    def __init__(self, settings: AdmissionFairSharingSettings) -> None:
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._samples: dict[tuple[str, str], tuple[Resources, float, int]] = {}
        self.version = 0  # bumped by every change of usage (see stamp)
        self.configure(settings)

    def configure(self, settings: AdmissionFairSharingSettings) -> None:
        """Take new settings; the history so far is kept."""
        self.settings = settings
        self._half_life = settings.half_life
        self._penalty_share = _alpha(settings.sampling_interval, self._half_life)
        # A weighted usage read again within a thousandth of the half-life (it moved less
        # than 0.07%) is the last one: a pass reads every LocalQueue's many times.
        self._fresh_for = self._half_life / 1000
        for entry in self._entries.values():
            entry.usage = None
        self.version += 1

    def stamp(self, now: float) -> tuple[int, float]:
        """Changes whenever the order of LocalQueues may have: after any change of usage,
        and as time passes (in steps within which a usage moves by less than 0.07%)."""
        step = now // self._fresh_for if self._fresh_for > 0 else now
        return (self.version, step)

    def _fold(self, lq: tuple[str, str], now: float) -> _Entry:
        """The LocalQueue's entry, its consumption decayed to ``now``. A ``now`` before the
        last fold's (the stream is not always in time order: a batch sent again after a
        failover comes after later ones) counts as no time, and the time stays the latest,
        so no interval is counted twice and nothing decays backwards."""
        entry = self._entries.setdefault(lq, _Entry())
        if entry.since is not None and now > entry.since:  # no time passed: nothing decays
            entry.consumed = decayed(
                entry.consumed, entry.current, now - entry.since, self._half_life
            )
        entry.since = now if entry.since is None else max(entry.since, now)
        entry.usage = None  # whoever folds may change it next
        return entry

    def admitted(
        self, lq: tuple[str, str], usage: Mapping[FlavorResource, int], sign: int, now: float
    ) -> None:
        """An admission of ``usage`` through the LocalQueue starts (1) or ends (-1). A start
        is charged the entry penalty (:meth:`penalize`) at ``now``, its own time: once per
        admission, whether this replica made it or folded it from the stream after a restart
        or as a standby, so the history after a replay is the history before it."""
        entry = self._fold(lq, now)
        self.version += 1
        amounts = per_resource(usage)
        for name, value in amounts.items():
            entry.current[name] = max(0.0, entry.current.get(name, 0.0) + sign * value)
        if sign > 0:
            self._charge(entry, amounts)

    def penalize(
        self, lq: tuple[str, str], usage: Mapping[FlavorResource, int], now: float
    ) -> None:
        """Kueue's entry penalty for a new admission: its requests times the share one
        sampling interval folds in, added at once (Kueue adds it to the consumedResources it
        persists at the next sample)."""
        entry = self._fold(lq, now)
        self.version += 1
        self._charge(entry, per_resource(usage))

    def _charge(self, entry: _Entry, amounts: Mapping[str, float]) -> None:
        for name, value in amounts.items():
            entry.consumed[name] = entry.consumed.get(name, 0.0) + value * self._penalty_share

    def running(self, lq: tuple[str, str], usage: Mapping[FlavorResource, int], now: float) -> None:
        """What the LocalQueue's admitted workloads use now, as the books say (after a
        configuration change, which may have just turned admission fair sharing on)."""
        self._fold(lq, now).current = per_resource(usage)
        self.version += 1

    def seed(self, lq: tuple[str, str], consumed: Mapping[str, float], now: float) -> None:
        """Start a LocalQueue's history from ``consumed`` (Kueue's persisted status)."""
        entry = self._fold(lq, now)
        entry.consumed = dict(consumed)
        self.version += 1

    def consumed(self, lq: tuple[str, str], now: float) -> Resources:
        """The LocalQueue's decayed consumption now (its status' consumedResources)."""
        return dict(self._fold(lq, now).consumed)

    def sampled(self, lq: tuple[str, str], now: float) -> tuple[Resources, float]:
        """The consumption as the LocalQueue's status shows it, and when it was taken: taken
        again when a usage changed or once ``usageSamplingInterval`` has passed, not for the
        decay alone in between (on Kubernetes each change is a write of the status)."""
        sample = self._samples.get(lq)
        if (
            sample is None
            or sample[2] != self.version
            or not 0 <= now - sample[1] < self.settings.sampling_interval
        ):
            sample = self._samples[lq] = (self.consumed(lq, now), now, self.version)
        return sample[0], sample[1]

    def usage(self, lq: tuple[str, str], weight: float, now: float) -> float:
        """The LocalQueue's weighted usage now (lower goes first)."""
        entry = self._entries.get(lq)
        last = None if entry is None else entry.usage
        if last is not None and last[1] == weight and 0 <= now - last[0] <= self._fresh_for:
            return last[2]
        value = weighted_usage(self.consumed(lq, now), weight, self.settings.resource_weights)
        self._entries[lq].usage = (now, weight, value)
        return value
