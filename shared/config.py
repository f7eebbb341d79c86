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

This module parses and checks; the model is in shared/config_kueue.py (Kueue's and
Kubernetes' kinds), shared/config_berth.py (Berth's own) and shared/config_base.py (what they
share), all re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from shared.admission_checks import (
    WaitForPodsReady,
    check_cluster_queue_checks,
    check_controller,
    check_wait_for_pods_ready,
)
from shared.config_base import (
    ConfigError,
    ObjectMeta,
    Quantity,
    Spec,
)
from shared.config_berth import (
    AdmissionSettings,
    AgeingPolicy,
    ClusterQueuePolicy,
    ClusterQueuePolicySpec,
    Configuration,
    ConfigurationSpec,
    FairSharingSettings,
    FairSharingStrategy,
    WaitTarget,
    ageing_for,
    ageing_of,
    policy_for,
)
from shared.config_fairness import check_fairness
from shared.config_kueue import (
    AdmissionCheck,
    BorrowWithinCohort,
    ClusterQueue,
    ClusterQueuePreemption,
    ClusterQueueSpec,
    Cohort,
    CohortSpec,
    FairSharing,
    FlavorFungibility,
    FlavorQuotas,
    LabelSelector,
    LabelSelectorRequirement,
    LocalQueue,
    LocalQueueSpec,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    Taint,
    Toleration,
    WorkloadPriorityClass,
)
from shared.durations import parse_duration
from shared.names import (
    InvalidName,
    check_label_key,
    check_label_value,
    check_name,
    check_namespace,
)
from shared.quantities import QuantityError, parse_quantity

# The model lives in shared/config_base.py, shared/config_kueue.py and shared/config_berth.py;
# everything is re-exported here, so `from shared.config import ClusterQueue` keeps working.
__all__ = [
    "KIND_PLURALS",
    "VOLATILE_METADATA",
    "AdmissionCheck",
    "AdmissionSettings",
    "AgeingPolicy",
    "BorrowWithinCohort",
    "ClusterQueue",
    "ClusterQueuePolicy",
    "ClusterQueuePolicySpec",
    "ClusterQueuePreemption",
    "ClusterQueueSpec",
    "Cohort",
    "CohortSpec",
    "ConfigError",
    "ConfigObject",
    "Configuration",
    "ConfigurationSpec",
    "Documents",
    "FairSharing",
    "FairSharingSettings",
    "FairSharingStrategy",
    "FlavorFungibility",
    "FlavorQuotas",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LocalQueue",
    "LocalQueueSpec",
    "Namespace",
    "ObjectMeta",
    "PriorityClass",
    "Quantity",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceQuota",
    "Spec",
    "Taint",
    "Toleration",
    "WaitTarget",
    "WorkloadPriorityClass",
    "ageing_for",
    "ageing_of",
    "config_key",
    "config_key_prefix",
    "decode_object",
    "encode_object",
    "is_config_kind",
    "load_documents",
    "object_key",
    "parse_object",
    "place_of",
    "policy_for",
    "wait_for_pods_ready_of",
]


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


# Metadata an API server rewrites at every write, never part of what an object says: not
# stored in the config bucket, whether the object is mirrored from a cluster or applied.
VOLATILE_METADATA = frozenset(("resourceVersion", "managedFields", "generation", "selfLink"))


def config_key(kind: str, name: str, namespace: str | None = None) -> str:
    """The config bucket's key of an object: ``<kind>.<namespace or _>.<name>``, the kind
    (``ClusterQueue``) in lower case; ``_`` stands for no namespace (a cluster-scoped kind)."""
    return f"{config_key_prefix(kind, namespace or '_')}{name}"


def config_key_prefix(kind: str, namespace: str | None = None) -> str:
    """What every key of ``kind`` (in ``namespace``, when given) starts with."""
    return f"{kind.lower()}.{namespace}." if namespace else f"{kind.lower()}."


def wait_for_pods_ready_of(objects: Iterable[ConfigObject]) -> WaitForPodsReady | None:
    """The waitForPodsReady settings in force: the first Configuration's (None: none set).
    Admission times pods against them; the watcher reports pods' readiness only while they
    are enabled, as Kueue sets the PodsReady condition only then."""
    for obj in objects:
        if isinstance(obj, Configuration):
            return obj.spec.wait_for_pods_ready
    return None


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


class Documents(list[dict[str, Any]]):
    """The objects of one input, in order, and where each stands (:func:`place_of`): a
    List's items are objects of their own, named by their document and their place in it."""

    def __init__(self) -> None:
        super().__init__()
        self.places: list[str] = []

    def add(self, document: dict[str, Any], place: str) -> None:
        self.append(document)
        self.places.append(place)


def place_of(documents: list[dict[str, Any]], source: str, index: int) -> str:
    """Where the ``index``-th object of ``documents`` stands in its input, for messages:
    ``<source>: document <n>``, or ``<source>: document <n>, items[<m>]`` for an item of a
    List (as :func:`load_documents` read it)."""
    if isinstance(documents, Documents) and index < len(documents.places):
        return documents.places[index]
    return f"{source}: document {index + 1}"


def load_documents(text: str, *, source: str = "input") -> Documents:
    """Split multi-document YAML into mappings, skipping empty documents; a ``kind: List``
    (what ``berth get -o yaml`` and ``kubectl get -o yaml`` print) is its items, as kubectl
    reads one.

    A syntax error is reported with its line, as one line of text; the bounds of
    :mod:`shared.yaml_input` (size, depth, alias expansion) apply.
    """
    # only the CLI reads YAML: imported here, a service's start does not import PyYAML
    from shared.yaml_input import YamlInputError, load_all

    try:
        documents = load_all(text, source=source)
    except YamlInputError as error:
        raise ConfigError(str(error)) from None
    result = Documents()
    for index, document in enumerate(documents):
        where = f"{source}: document {index + 1}"
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ConfigError(f"{where} is not a mapping")
        if document.get("kind") != "List" or document.get("apiVersion") != "v1":
            result.add(document, where)
            continue
        items = document.get("items") or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ConfigError(f"{where}: `items` of a List must be a list of objects")
        for number, item in enumerate(items):
            result.add(item, f"{where}, items[{number}]")
    return result
