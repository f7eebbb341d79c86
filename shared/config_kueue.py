"""Kueue's configuration objects, and the Kubernetes ones Kueue reads, as Berth decodes them
(the kinds and their parsing: :mod:`shared.config`)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from shared.admission_checks import AdmissionCheckSpec, AdmissionChecksStrategy
from shared.config_base import Int32, ObjectMeta, Quantity, Spec
from shared.config_fairness import AdmissionScope

__all__ = [
    "AdmissionCheck",
    "BorrowWithinCohort",
    "ClusterQueue",
    "ClusterQueuePreemption",
    "ClusterQueueSpec",
    "Cohort",
    "CohortSpec",
    "FairSharing",
    "FlavorFungibility",
    "FlavorQuotas",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LocalQueue",
    "LocalQueueSpec",
    "Namespace",
    "PriorityClass",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceQuota",
    "Taint",
    "Toleration",
    "WorkloadPriorityClass",
]


class LabelSelectorRequirement(Spec):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(Spec):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []

    def matches(self, labels: dict[str, str]) -> bool:
        """Kubernetes label-selector semantics; an empty selector matches everything."""
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for requirement in self.match_expressions:
            present = requirement.key in labels
            if requirement.operator == "In":
                if not present or labels[requirement.key] not in requirement.values:
                    return False
            elif requirement.operator == "NotIn":
                if present and labels[requirement.key] in requirement.values:
                    return False
            elif requirement.operator == "Exists":
                if not present:
                    return False
            elif present:  # DoesNotExist
                return False
        return True


class Toleration(Spec):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Taint(Spec):
    key: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    value: str = ""
    time_added: str | None = None


# --- ResourceFlavor ---------------------------------------------------------------------------


class ResourceFlavorSpec(Spec):
    node_labels: dict[str, str] = {}
    node_taints: list[Taint] = []
    tolerations: list[Toleration] = []
    topology_name: str | None = None


class ResourceFlavor(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: ResourceFlavorSpec = msgspec.field(default_factory=ResourceFlavorSpec)
    status: dict[str, Any] | None = None


# --- ClusterQueue -----------------------------------------------------------------------------


class ResourceQuota(Spec):
    name: str
    nominal_quota: Quantity = 0
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(Spec):
    name: str
    resources: list[ResourceQuota]


class ResourceGroup(Spec):
    covered_resources: list[str]
    flavors: list[FlavorQuotas]


class FlavorFungibility(Spec):
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor", "Borrow"] = "MayStopSearch"
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor", "Preempt"] = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class BorrowWithinCohort(Spec):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(Spec):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort = msgspec.field(default_factory=BorrowWithinCohort)
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"


class FairSharing(Spec):
    weight: Quantity = 1


class ClusterQueueSpec(Spec):
    resource_groups: list[ResourceGroup] = []
    cohort: str = ""  # v1beta1
    cohort_name: str = ""  # v1beta2
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"
    # None is Kueue's "nothing" selector: no namespace may use this queue.
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility = msgspec.field(default_factory=FlavorFungibility)
    preemption: ClusterQueuePreemption = msgspec.field(default_factory=ClusterQueuePreemption)
    admission_checks: list[str] = []
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"
    fair_sharing: FairSharing | None = None
    admission_scope: AdmissionScope | None = None
    concurrent_admission_policy: dict[str, Any] | None = None  # v1beta2


class ClusterQueue(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: ClusterQueueSpec = msgspec.field(default_factory=ClusterQueueSpec)
    status: dict[str, Any] | None = None

    @property
    def cohort_name(self) -> str:
        """The cohort, whichever API version named it."""
        return self.spec.cohort_name or self.spec.cohort


# --- Cohort (hierarchical) --------------------------------------------------------------------


class CohortSpec(Spec):
    parent: str = ""  # v1alpha1
    parent_name: str = ""  # v1beta1 / v1beta2
    resource_groups: list[ResourceGroup] = []
    fair_sharing: FairSharing | None = None


class Cohort(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: CohortSpec = msgspec.field(default_factory=CohortSpec)
    status: dict[str, Any] | None = None

    @property
    def parent_name(self) -> str:
        return self.spec.parent_name or self.spec.parent


# --- AdmissionCheck (shared/admission_checks.py) -------------------------------------------


class AdmissionCheck(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: AdmissionCheckSpec
    status: dict[str, Any] | None = None


# --- LocalQueue -------------------------------------------------------------------------------


class LocalQueueSpec(Spec):
    cluster_queue: str
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"
    fair_sharing: FairSharing | None = None


class LocalQueue(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: LocalQueueSpec
    status: dict[str, Any] | None = None


# --- priorities -------------------------------------------------------------------------------


USER_PRIORITY_MAX = 1_000_000_000  # Kubernetes' HighestUserDefinablePriority
# Kubernetes' own classes, the only ones a system- name may have, each at its value.
SYSTEM_PRIORITY_CLASSES = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}


class WorkloadPriorityClass(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    value: Int32
    description: str = ""


class PriorityClass(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    value: Int32
    global_default: bool = False
    description: str = ""
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"

    def __post_init__(self) -> None:
        """As Kubernetes validates it (``ValidatePriorityClass``): a ``system-`` name is
        reserved for its two built-in classes at their values; any other class is at most
        1,000,000,000 (HighestUserDefinablePriority)."""
        name = self.metadata.name
        if name.startswith("system-"):
            if SYSTEM_PRIORITY_CLASSES.get(name) != self.value or self.global_default:
                raise ValueError(
                    f"name {name!r}: priority class names with 'system-' prefix are reserved"
                    " for system use only - at `$.metadata.name`"
                )
        elif self.value > USER_PRIORITY_MAX:
            raise ValueError(
                f"value {self.value}: the maximum allowed value of a user defined priority"
                f" is {USER_PRIORITY_MAX:,} - at `$.value`"
            )


# --- Namespace --------------------------------------------------------------------------------


class Namespace(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None

    @property
    def labels(self) -> dict[str, str]:
        """Labels as namespaceSelector sees them, with the implicit metadata.name label."""
        return {**self.metadata.labels, "kubernetes.io/metadata.name": self.metadata.name}
