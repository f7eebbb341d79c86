"""The configuration Berth reads: Kueue's objects, unchanged, and Berth's own.

Accepted kinds (``apiVersion`` / ``kind``):

- ``kueue.x-k8s.io/v1beta1`` and ``v1beta2``: ResourceFlavor, ClusterQueue, LocalQueue,
  WorkloadPriorityClass, Cohort (``v1alpha1`` Cohort too);
- ``v1`` Namespace (its labels feed ``namespaceSelector``);
- ``scheduling.k8s.io/v1`` PriorityClass.

Objects are decoded with msgspec into typed Structs; spec fields are strict (a typo is an
error that names its path), metadata is lenient (Kubernetes adds many fields there). Every
quantity is checked here, so a bad one is refused at ``berth apply`` time and never reaches a
service. Objects travel as JSON in the config key-value bucket, keyed by :func:`object_key`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from shared.admission_checks import (
    AdmissionCheckSpec,
    AdmissionChecksStrategy,
    WaitForPodsReady,
    check_cluster_queue_checks,
    check_controller,
    check_wait_for_pods_ready,
)
from shared.config_fairness import AdmissionFairSharingSettings, AdmissionScope, check_fairness
from shared.durations import parse_duration
from shared.names import (
    InvalidName,
    check_label_key,
    check_label_value,
    check_name,
    check_namespace,
)
from shared.quantities import QuantityError, parse_quantity
from shared.yaml_input import YamlInputError, load_all

__all__ = [
    "KIND_PLURALS",
    "AdmissionCheck",
    "AgeingPolicy",
    "ClusterQueue",
    "ClusterQueuePolicy",
    "Cohort",
    "ConfigError",
    "ConfigObject",
    "Configuration",
    "LocalQueue",
    "Namespace",
    "ObjectMeta",
    "PriorityClass",
    "ResourceFlavor",
    "WaitTarget",
    "WorkloadPriorityClass",
    "ageing_for",
    "config_key",
    "config_key_prefix",
    "decode_object",
    "load_documents",
    "object_key",
    "parse_object",
    "policy_for",
]


class ConfigError(ValueError):
    """An object that Berth cannot accept; the message names the document and the field."""


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    generation: int = 0


class _Spec(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    """Base of every spec: strict, so that a misspelt field is refused rather than ignored."""


# A YAML number is a quantity like its quoted form (parse_quantity): 4, 0.5, "500m".
Quantity = str | int | float


class LabelSelectorRequirement(_Spec):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(_Spec):
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


class Toleration(_Spec):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Taint(_Spec):
    key: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    value: str = ""
    time_added: str | None = None


# --- ResourceFlavor ---------------------------------------------------------------------------


class ResourceFlavorSpec(_Spec):
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


class ResourceQuota(_Spec):
    name: str
    nominal_quota: Quantity = 0
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(_Spec):
    name: str
    resources: list[ResourceQuota]


class ResourceGroup(_Spec):
    covered_resources: list[str]
    flavors: list[FlavorQuotas]


class FlavorFungibility(_Spec):
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor", "Borrow"] = "MayStopSearch"
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor", "Preempt"] = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class BorrowWithinCohort(_Spec):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(_Spec):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort = msgspec.field(default_factory=BorrowWithinCohort)
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"


class FairSharing(_Spec):
    weight: Quantity = 1


class ClusterQueueSpec(_Spec):
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


class CohortSpec(_Spec):
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


class LocalQueueSpec(_Spec):
    cluster_queue: str
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"
    fair_sharing: FairSharing | None = None


class LocalQueue(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    spec: LocalQueueSpec
    status: dict[str, Any] | None = None


# --- priorities -------------------------------------------------------------------------------


class WorkloadPriorityClass(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    value: int
    description: str = ""


class PriorityClass(msgspec.Struct, rename="camel", omit_defaults=True):
    api_version: str
    metadata: ObjectMeta
    value: int
    global_default: bool = False
    description: str = ""
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"


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


# --- Berth's own objects (berth.dev/v1alpha1) ------------------------------------------------


class AgeingPolicy(_Spec):
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


class ClusterQueuePolicySpec(_Spec):
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
    return policy_for(policies, cluster_queue).spec.ageing or AgeingPolicy()


FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def _default_strategies() -> list[FairSharingStrategy]:
    return ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]  # Kueue's default


class FairSharingSettings(_Spec):
    enable: bool = False
    preemption_strategies: list[FairSharingStrategy] = msgspec.field(
        default_factory=_default_strategies
    )


class WaitTarget(_Spec):
    """Workloads of at least ``min_priority`` (every workload, without it) should be admitted
    within ``wait`` of their creation."""

    wait: str
    min_priority: int | None = None


class AdmissionSettings(_Spec):
    # While a workload waits for quota, lower-priority workloads of its cohort may still use
    # their own ClusterQueue's nominal quota but do not borrow the room it waits for. Off:
    # Kueue's BestEffortFIFO, where whatever fits is admitted.
    borrowing_yields_to_higher_priority: bool = False
    # Set: pending workloads are ordered by deadline (creation + the target of their
    # priority), earliest first, instead of by priority. Empty: Kueue's priority order.
    wait_targets: list[WaitTarget] = []


class ConfigurationSpec(_Spec):
    fair_sharing: FairSharingSettings = msgspec.field(default_factory=FairSharingSettings)
    admission: AdmissionSettings = msgspec.field(default_factory=AdmissionSettings)
    admission_fair_sharing: AdmissionFairSharingSettings | None = None  # shared/config_fairness
    wait_for_pods_ready: WaitForPodsReady | None = None  # shared/admission_checks.py


class Configuration(msgspec.Struct, rename="camel", omit_defaults=True):
    """Berth-wide settings (Kueue keeps these in its controller's Configuration)."""

    api_version: str
    metadata: ObjectMeta
    spec: ConfigurationSpec = msgspec.field(default_factory=ConfigurationSpec)


ConfigObject = (
    ResourceFlavor
    | ClusterQueue
    | Cohort
    | LocalQueue
    | WorkloadPriorityClass
    | PriorityClass
    | Namespace
    | ClusterQueuePolicy
    | Configuration
    | AdmissionCheck
)

# kind -> (accepted apiVersions, namespaced, kubectl-style resource name)
_KINDS: dict[str, tuple[frozenset[str], bool, str]] = {
    "ResourceFlavor": (
        frozenset({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}),
        False,
        "resourceflavor.kueue.x-k8s.io",
    ),
    "ClusterQueue": (
        frozenset({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}),
        False,
        "clusterqueue.kueue.x-k8s.io",
    ),
    "Cohort": (
        frozenset({"kueue.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}),
        False,
        "cohort.kueue.x-k8s.io",
    ),
    "LocalQueue": (
        frozenset({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}),
        True,
        "localqueue.kueue.x-k8s.io",
    ),
    "WorkloadPriorityClass": (
        frozenset({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}),
        False,
        "workloadpriorityclass.kueue.x-k8s.io",
    ),
    "PriorityClass": (
        frozenset({"scheduling.k8s.io/v1"}),
        False,
        "priorityclass.scheduling.k8s.io",
    ),
    "Namespace": (frozenset({"v1"}), False, "namespace"),
    "ClusterQueuePolicy": (
        frozenset({"berth.dev/v1alpha1"}),
        False,
        "clusterqueuepolicy.berth.dev",
    ),
    "Configuration": (frozenset({"berth.dev/v1alpha1"}), False, "configuration.berth.dev"),
    "AdmissionCheck": (
        frozenset({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"}),
        False,
        "admissioncheck.kueue.x-k8s.io",
    ),
}
KIND_PLURALS = {kind: resource for kind, (_, _, resource) in _KINDS.items()}

_TYPES: dict[str, type[ConfigObject]] = {
    "ResourceFlavor": ResourceFlavor,
    "ClusterQueue": ClusterQueue,
    "Cohort": Cohort,
    "LocalQueue": LocalQueue,
    "WorkloadPriorityClass": WorkloadPriorityClass,
    "PriorityClass": PriorityClass,
    "Namespace": Namespace,
    "ClusterQueuePolicy": ClusterQueuePolicy,
    "Configuration": Configuration,
    "AdmissionCheck": AdmissionCheck,
}


def is_config_kind(kind: str) -> bool:
    return kind in _KINDS


def parse_object(document: Any, *, where: str = "document") -> ConfigObject:
    """Validate one decoded YAML/JSON document and return its typed object.

    Raises :class:`ConfigError` with a one-line message naming ``where`` and the field.
    """
    if not isinstance(document, dict):
        raise ConfigError(f"{where}: expected a mapping with apiVersion and kind")
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    if not kind:
        raise ConfigError(f"{where}: missing field `kind`")
    if not api_version:
        raise ConfigError(f"{where}: missing field `apiVersion`")
    if not isinstance(kind, str) or kind not in _KINDS:
        known = ", ".join(sorted(_KINDS))
        raise ConfigError(f"{where}: unknown kind {kind!r} (config kinds: {known})")
    versions, namespaced, _ = _KINDS[kind]
    if not isinstance(api_version, str) or api_version not in versions:
        raise ConfigError(
            f"{where}: {kind} does not exist in apiVersion {api_version!r}"
            f" (use {' or '.join(sorted(versions))})"
        )
    body = {key: value for key, value in document.items() if key != "kind"}
    try:
        obj = msgspec.convert(body, type=_TYPES[kind], str_keys=True)
    except msgspec.ValidationError as error:
        raise ConfigError(f"{where}: {kind}: {error}") from error
    name = obj.metadata.name
    if not name:
        raise ConfigError(f"{where}: {kind}: missing field `metadata.name`")
    if namespaced and not obj.metadata.namespace:
        obj.metadata.namespace = "default"
    elif not namespaced and obj.metadata.namespace:
        raise ConfigError(f"{where}: {kind} {name} is cluster-scoped; remove `metadata.namespace`")
    try:
        _check_names(obj)
    except InvalidName as error:
        raise ConfigError(f"{where}: {kind}: {error}") from None
    _check_quantities(obj, where=f"{where}: {kind} {name}")
    try:
        check_fairness(obj, where=f"{where}: {kind} {name}")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    try:  # admission checks and waitForPodsReady (shared/admission_checks.py)
        if isinstance(obj, AdmissionCheck):
            check_controller(obj.spec)
        elif isinstance(obj, ClusterQueue):
            spec = obj.spec
            check_cluster_queue_checks(spec.admission_checks, spec.admission_checks_strategy)
        elif isinstance(obj, Configuration) and obj.spec.wait_for_pods_ready is not None:
            check_wait_for_pods_ready(obj.spec.wait_for_pods_ready)
    except ValueError as error:
        raise ConfigError(f"{where}: {kind} {name}: {error}") from None
    if isinstance(obj, ClusterQueuePolicy):
        _check_policy(obj, where=f"{where}: {kind} {name}")
    if isinstance(obj, Configuration):
        _check_wait_targets(obj.spec.admission.wait_targets, where=f"{where}: {kind} {name}")
    return obj


def _check_names(obj: ConfigObject) -> None:
    """Kubernetes' rules for the object's own name, namespace and labels, and the same for
    every name it refers to (Kueue's CRDs check references as names too)."""
    check_name(obj.metadata.name)
    if obj.metadata.namespace:
        check_namespace(obj.metadata.namespace)
    for key, value in obj.metadata.labels.items():
        check_label_key(key, "metadata.labels")
        check_label_value(value, f"metadata.labels.{key}")
    references: list[tuple[str, str]] = []  # (field, name); an empty optional one is fine
    if isinstance(obj, LocalQueue):
        check_name(obj.spec.cluster_queue, "spec.clusterQueue")
    elif isinstance(obj, ClusterQueue):
        references.append(("spec.cohort", obj.cohort_name))
    elif isinstance(obj, Cohort):
        references.append(("spec.parentName", obj.parent_name))
    elif isinstance(obj, ClusterQueuePolicy):
        queues = obj.spec.cluster_queues
        references += [(f"spec.clusterQueues[{i}]", q) for i, q in enumerate(queues)]
    if isinstance(obj, ClusterQueue | Cohort):
        for g, group in enumerate(obj.spec.resource_groups):
            for f, flavor in enumerate(group.flavors):
                references.append((f"spec.resourceGroups[{g}].flavors[{f}].name", flavor.name))
    for field, value in references:
        if value:
            check_name(value, field)


def _check_wait_targets(targets: list[WaitTarget], *, where: str) -> None:
    floors: set[int | None] = set()
    for index, target in enumerate(targets):
        path = f"spec.admission.waitTargets[{index}]"
        try:
            parse_duration(target.wait)
        except ValueError as error:
            raise ConfigError(f"{where}: `{path}.wait`: {error}") from error
        if target.min_priority in floors:
            floor = (
                "no minPriority"
                if target.min_priority is None
                else f"minPriority {target.min_priority}"
            )
            raise ConfigError(f"{where}: `{path}`: another target already has {floor}")
        floors.add(target.min_priority)


def _check_policy(policy: ClusterQueuePolicy, *, where: str) -> None:
    durations = {
        "spec.minimumRunTime": policy.spec.minimum_run_time,
        "spec.evictionGracePeriod": policy.spec.eviction_grace_period,
    }
    per_hour = policy.spec.max_preemptions_per_hour
    if per_hour is not None and per_hour < 1:
        raise ConfigError(f"{where}: `spec.maxPreemptionsPerHour` must be at least 1 (or null)")
    ageing = policy.spec.ageing
    if ageing is not None:
        durations["spec.ageing.reserveAfter"] = ageing.reserve_after
        durations["spec.ageing.protectFor"] = ageing.protect_for
        if ageing.priority_per_minute < 0:
            raise ConfigError(f"{where}: `spec.ageing.priorityPerMinute` must not be negative")
        if ageing.max_boost is not None and ageing.max_boost < 0:
            raise ConfigError(f"{where}: `spec.ageing.maxBoost` must not be negative")
        if not 0 < ageing.max_reserved_share <= 1:
            raise ConfigError(f"{where}: `spec.ageing.maxReservedShare` must be in (0, 1]")
    for path, text in durations.items():
        if text is not None:
            try:
                parse_duration(text)
            except ValueError as error:
                raise ConfigError(f"{where}: `{path}`: {error}") from error


def _check_quantities(obj: ConfigObject, *, where: str) -> None:
    """Refuse a bad quantity at apply time, naming the field's path."""
    groups: list[ResourceGroup] = []
    if isinstance(obj, ClusterQueue | Cohort):
        groups = obj.spec.resource_groups
        if obj.spec.fair_sharing is not None:
            _check_one(obj.spec.fair_sharing.weight, f"{where}: `spec.fairSharing.weight`")
    for g, group in enumerate(groups):
        covered = group.covered_resources
        for f, flavor in enumerate(group.flavors):
            names = [resource.name for resource in flavor.resources]
            if sorted(names) != sorted(covered):
                raise ConfigError(
                    f"{where}: `spec.resourceGroups[{g}].flavors[{f}].resources` must list"
                    f" exactly the coveredResources {covered}, got {names}"
                )
            for r, quota in enumerate(flavor.resources):
                path = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                _check_one(quota.nominal_quota, f"{where}: `{path}.nominalQuota`")
                if quota.borrowing_limit is not None:
                    _check_one(quota.borrowing_limit, f"{where}: `{path}.borrowingLimit`")
                if quota.lending_limit is not None:
                    lend = _check_one(quota.lending_limit, f"{where}: `{path}.lendingLimit`")
                    if lend > parse_quantity(quota.nominal_quota):
                        raise ConfigError(
                            f"{where}: `{path}.lendingLimit` must not exceed nominalQuota"
                        )


def _check_one(value: Quantity, where: str) -> int:
    try:
        return parse_quantity(value)
    except QuantityError as error:
        raise ConfigError(f"{where}: {error}") from error


def config_key(kind: str, name: str, namespace: str | None = None) -> str:
    """The config bucket's key of an object: ``<kind>.<namespace or _>.<name>``, the kind
    (``ClusterQueue``) in lower case; ``_`` stands for no namespace (a cluster-scoped kind)."""
    return f"{config_key_prefix(kind, namespace or '_')}{name}"


def config_key_prefix(kind: str, namespace: str | None = None) -> str:
    """What every key of ``kind`` (in ``namespace``, when given) starts with."""
    return f"{kind.lower()}.{namespace}." if namespace else f"{kind.lower()}."


def object_key(obj: ConfigObject) -> str:
    """The config bucket's key of ``obj`` (see :func:`config_key`)."""
    return config_key(type(obj).__name__, obj.metadata.name, obj.metadata.namespace)


_encoder = msgspec.json.Encoder()


def encode_object(obj: ConfigObject) -> bytes:
    """JSON for the bucket, with ``kind`` restored so the value stands alone."""
    body = msgspec.to_builtins(obj)
    body["kind"] = type(obj).__name__
    return _encoder.encode(body)


def decode_object(data: bytes) -> ConfigObject:
    """Decode a bucket value written by :func:`encode_object`."""
    return parse_object(msgspec.json.decode(data), where="stored object")


def load_documents(text: str, *, source: str = "input") -> list[dict[str, Any]]:
    """Split multi-document YAML into mappings, skipping empty documents.

    A syntax error is reported with its line, as one line of text; the bounds of
    :mod:`shared.yaml_input` (size, depth, alias expansion) apply.
    """
    try:
        documents = load_all(text, source=source)
    except YamlInputError as error:
        raise ConfigError(str(error)) from None
    result: list[dict[str, Any]] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ConfigError(f"{source}: document {index + 1} is not a mapping")
        result.append(document)
    return result
