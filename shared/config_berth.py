"""Berth's own configuration objects (``berth.dev/v1alpha1``): ClusterQueuePolicy (ageing,
preemption limits) and the Berth-wide Configuration (see :mod:`shared.config`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from shared.admission_checks import WaitForPodsReady
from shared.config_base import ObjectMeta, Spec
from shared.config_fairness import AdmissionFairSharingSettings

__all__ = [
    "AdmissionSettings",
    "AgeingPolicy",
    "ClusterQueuePolicy",
    "ClusterQueuePolicySpec",
    "Configuration",
    "ConfigurationSpec",
    "FairSharingSettings",
    "FairSharingStrategy",
    "WaitTarget",
    "ageing_for",
    "ageing_of",
    "policy_for",
]


# --- Berth's own objects (berth.dev/v1alpha1) ------------------------------------------------


class AgeingPolicy(Spec):
    """How a preempted managed job's effective priority grows while it waits (see docs)."""

    # Priority points gained per minute since the job was first preempted; 0 turns ageing off.
    priority_per_minute: int = 10
    # The boost never exceeds this; None means no cap.
    max_boost: int | None = None
    # Whether a boosted job may preempt with its boost (off: no ping-pong with its preemptor).
    boost_can_preempt: bool = False
    # After waiting this long, the job gets a reservation: nothing new is admitted ahead of it
    # (null turns it off). This is what bounds the wait; see docs/ageing.md.
    reserve_after: str | None = "10m"
    # A workload ageing brought back is not a victim for this long after its admission
    # (spec.minimumRunTime if that is longer); after it, its boost no longer shields it.
    protect_for: str | None = "2m"
    # The price of ageing: reservations together hold at most this share of a
    # ClusterQueue's nominal quota (per resource); higher classes keep the rest.
    max_reserved_share: float = 0.5


class ClusterQueuePolicySpec(Spec):
    # The ClusterQueues this policy applies to; empty: the default for every ClusterQueue.
    cluster_queues: list[str] = []
    # A workload that has run less than this may not be preempted (PreemptExemptTime).
    minimum_run_time: str | None = None
    # A workload preempted this often in the last hour is not a victim of priority
    # preemption until the hour has passed (null: no limit); docs/preemption.md.
    max_preemptions_per_hour: int | None = 10
    # How long a victim may take to stop (Kubernetes' terminationGracePeriodSeconds); the
    # starvation bound counts it (docs/ageing.md).
    eviction_grace_period: str = "30s"
    ageing: AgeingPolicy | None = None


class ClusterQueuePolicy(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: ClusterQueuePolicySpec = msgspec.field(default_factory=ClusterQueuePolicySpec)


def policy_for(policies: Iterable[ClusterQueuePolicy], cluster_queue: str) -> ClusterQueuePolicy:
    """The policy of a ClusterQueue: the one that names it, else the default (no names), else
    the built-in defaults (ageing on, no minimum run time)."""
    default: ClusterQueuePolicy | None = None
    for policy in policies:
        if cluster_queue in policy.spec.cluster_queues:
            return policy
        if not policy.spec.cluster_queues and default is None:
            default = policy
    return default or ClusterQueuePolicy(
        api_version="berth.dev/v1alpha1", metadata=ObjectMeta(name="built-in")
    )


def ageing_for(policies: Iterable[ClusterQueuePolicy], cluster_queue: str) -> AgeingPolicy:
    return ageing_of(policy_for(policies, cluster_queue))


def ageing_of(policy: ClusterQueuePolicy) -> AgeingPolicy:
    """A policy's ageing: its own, or the built-in one where it sets none."""
    return policy.spec.ageing or AgeingPolicy()


FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def _default_strategies() -> list[FairSharingStrategy]:
    return ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]  # Kueue's default


class FairSharingSettings(Spec):
    enable: bool = False
    preemption_strategies: list[FairSharingStrategy] = msgspec.field(
        default_factory=_default_strategies
    )


class WaitTarget(Spec):
    """Workloads of at least ``min_priority`` (every workload, without it) should be admitted
    within ``wait`` of their creation."""

    wait: str
    min_priority: int | None = None


class AdmissionSettings(Spec):
    # While a workload waits for quota, lower-priority workloads of its cohort may still use
    # their own ClusterQueue's nominal quota but do not borrow the room it waits for. Off:
    # Kueue's BestEffortFIFO, where whatever fits is admitted.
    borrowing_yields_to_higher_priority: bool = False
    # Set: pending workloads are ordered by deadline (creation + the target of their
    # priority), earliest first, instead of by priority. Empty: Kueue's priority order.
    wait_targets: list[WaitTarget] = []


class ConfigurationSpec(Spec):
    fair_sharing: FairSharingSettings = msgspec.field(default_factory=FairSharingSettings)
    admission: AdmissionSettings = msgspec.field(default_factory=AdmissionSettings)
    admission_fair_sharing: AdmissionFairSharingSettings | None = None  # shared/config_fairness
    wait_for_pods_ready: WaitForPodsReady | None = None  # shared/admission_checks.py


class Configuration(msgspec.Struct, rename="camel", omit_defaults=True):
    """Berth-wide settings (Kueue keeps these in its controller's Configuration)."""

    api_version: str
    metadata: ObjectMeta
    spec: ConfigurationSpec = msgspec.field(default_factory=ConfigurationSpec)
