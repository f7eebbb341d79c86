"""What Berth does with each field of Kueue's configuration objects: honoured, warned or refused.

Berth accepts Kueue's files unchanged, so a field it does not act on must not vanish silently:
every field of the config model (:mod:`shared.config`) has one row in :data:`FIELD_STATUS`,
and ``berth apply`` names each *warned* field a file sets, one line on stderr. Kueue objects
Berth has no model for (topologies, MultiKueue, ProvisioningRequestConfig) are accepted and
skipped with one warning each (:data:`UNSUPPORTED_KINDS`) rather than failing the whole apply.

:func:`field_paths` walks the msgspec Structs, so a field added to the model without a row here
fails ``tests/test_kueue_fields.py``; :func:`render_markdown` writes ``docs/kueue-fields.md``
(``python -m berth_cli.config_fields > docs/kueue-fields.md``), and the same test fails when the
page drifts from the model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import msgspec

from shared import config

__all__ = [
    "FIELD_STATUS",
    "UNSUPPORTED_KINDS",
    "field_paths",
    "render_markdown",
    "unsupported_object",
    "warned_fields",
]

Status = Literal["honoured", "warned", "inert"]

# Kubernetes' own types, listed as one field: Berth reads them whole with Kubernetes' meaning.
_LEAVES = (config.LabelSelector, config.Taint, config.Toleration)
# Object-level fields that are not configuration (identity, or written by a controller).
_SKIPPED = frozenset({"apiVersion", "metadata", "status"})
# The Kueue kinds (and the Kubernetes ones Kueue reads) in page order; Berth's own kinds
# (berth.dev) are documented with their feature.
KINDS: dict[str, type[msgspec.Struct]] = {
    "ResourceFlavor": config.ResourceFlavor,
    "ClusterQueue": config.ClusterQueue,
    "Cohort": config.Cohort,
    "LocalQueue": config.LocalQueue,
    "WorkloadPriorityClass": config.WorkloadPriorityClass,
    "PriorityClass": config.PriorityClass,
    "Namespace": config.Namespace,
    "AdmissionCheck": config.AdmissionCheck,
}

_CHECKS = "a reservation waits for these checks (docs/admission-checks.md)"
# (kind, field path) -> (status, what Berth does). "warned" fields are named at apply when set;
# "inert" ones change nothing in Kueue either, so a warning would be noise.
FIELD_STATUS: dict[tuple[str, str], tuple[Status, str]] = {
    ("ResourceFlavor", "spec.nodeLabels"): ("honoured", "injected as the pods' node selector"),
    ("ResourceFlavor", "spec.nodeTaints"): ("honoured", "a workload must tolerate them"),
    ("ResourceFlavor", "spec.tolerations"): ("honoured", "added to the admitted pods"),
    ("ResourceFlavor", "spec.topologyName"): (
        "warned",
        "topology-aware scheduling is not supported",
    ),
    ("ClusterQueue", "spec.resourceGroups"): ("honoured", "quota per flavor and resource"),
    ("ClusterQueue", "spec.resourceGroups.coveredResources"): ("honoured", ""),
    ("ClusterQueue", "spec.resourceGroups.flavors"): ("honoured", "tried in order"),
    ("ClusterQueue", "spec.resourceGroups.flavors.name"): ("honoured", ""),
    ("ClusterQueue", "spec.resourceGroups.flavors.resources"): ("honoured", ""),
    ("ClusterQueue", "spec.resourceGroups.flavors.resources.name"): ("honoured", ""),
    ("ClusterQueue", "spec.resourceGroups.flavors.resources.nominalQuota"): ("honoured", ""),
    ("ClusterQueue", "spec.resourceGroups.flavors.resources.borrowingLimit"): ("honoured", ""),
    ("ClusterQueue", "spec.resourceGroups.flavors.resources.lendingLimit"): ("honoured", ""),
    ("ClusterQueue", "spec.cohort"): ("honoured", "v1beta1 name of cohortName"),
    ("ClusterQueue", "spec.cohortName"): ("honoured", "borrowing and lending in the cohort tree"),
    ("ClusterQueue", "spec.queueingStrategy"): ("honoured", "StrictFIFO and BestEffortFIFO"),
    ("ClusterQueue", "spec.namespaceSelector"): ("honoured", "against Namespace labels"),
    ("ClusterQueue", "spec.flavorFungibility"): ("honoured", ""),
    ("ClusterQueue", "spec.flavorFungibility.whenCanBorrow"): ("honoured", ""),
    ("ClusterQueue", "spec.flavorFungibility.whenCanPreempt"): ("honoured", ""),
    ("ClusterQueue", "spec.flavorFungibility.preference"): (
        "warned",
        "flavors are chosen by whenCanBorrow and whenCanPreempt alone",
    ),
    ("ClusterQueue", "spec.preemption"): ("honoured", "docs/preemption.md"),
    ("ClusterQueue", "spec.preemption.reclaimWithinCohort"): ("honoured", ""),
    ("ClusterQueue", "spec.preemption.borrowWithinCohort"): ("honoured", ""),
    ("ClusterQueue", "spec.preemption.borrowWithinCohort.policy"): ("honoured", ""),
    ("ClusterQueue", "spec.preemption.borrowWithinCohort.maxPriorityThreshold"): ("honoured", ""),
    ("ClusterQueue", "spec.preemption.withinClusterQueue"): ("honoured", ""),
    ("ClusterQueue", "spec.admissionChecks"): ("honoured", _CHECKS),
    ("ClusterQueue", "spec.admissionChecksStrategy"): ("honoured", ""),
    ("ClusterQueue", "spec.admissionChecksStrategy.admissionChecks"): ("honoured", _CHECKS),
    ("ClusterQueue", "spec.admissionChecksStrategy.admissionChecks.name"): ("honoured", ""),
    ("ClusterQueue", "spec.admissionChecksStrategy.admissionChecks.onFlavors"): (
        "honoured",
        "the check applies to workloads assigned one of these flavors",
    ),
    ("ClusterQueue", "spec.stopPolicy"): ("honoured", "Hold and HoldAndDrain"),
    ("ClusterQueue", "spec.fairSharing"): ("honoured", ""),
    ("ClusterQueue", "spec.fairSharing.weight"): (
        "honoured",
        "fair sharing (admission order and preemption), when the Configuration enables it",
    ),
    ("ClusterQueue", "spec.admissionScope"): (
        "honoured",
        "admission fair sharing across its LocalQueues, when the Configuration sets"
        " admissionFairSharing",
    ),
    ("ClusterQueue", "spec.admissionScope.admissionMode"): (
        "honoured",
        "UsageBasedAdmissionFairSharing or NoAdmissionFairSharing",
    ),
    ("ClusterQueue", "spec.concurrentAdmissionPolicy"): (
        "warned",
        "concurrent admission is not supported",
    ),
    ("Cohort", "spec.parent"): ("honoured", "v1alpha1 name of parentName"),
    ("Cohort", "spec.parentName"): ("honoured", "the cohort tree"),
    ("Cohort", "spec.resourceGroups"): ("honoured", "quota the cohort itself holds"),
    ("Cohort", "spec.resourceGroups.coveredResources"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors.name"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors.resources"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors.resources.name"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors.resources.nominalQuota"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors.resources.borrowingLimit"): ("honoured", ""),
    ("Cohort", "spec.resourceGroups.flavors.resources.lendingLimit"): ("honoured", ""),
    ("Cohort", "spec.fairSharing"): ("honoured", ""),
    ("Cohort", "spec.fairSharing.weight"): (
        "honoured",
        "its share where fair sharing compares cohorts (admission order and preemption)",
    ),
    ("LocalQueue", "spec.clusterQueue"): ("honoured", ""),
    ("LocalQueue", "spec.stopPolicy"): ("honoured", "Hold and HoldAndDrain"),
    ("LocalQueue", "spec.fairSharing"): ("honoured", "admission fair sharing"),
    ("LocalQueue", "spec.fairSharing.weight"): (
        "honoured",
        "divides its consumed usage where admission fair sharing orders LocalQueues",
    ),
    ("WorkloadPriorityClass", "value"): ("honoured", "the workload's priority"),
    ("WorkloadPriorityClass", "description"): ("inert", "descriptive"),
    ("PriorityClass", "value"): ("honoured", "the workload's priority"),
    ("PriorityClass", "globalDefault"): ("honoured", "the priority of a pod without a class"),
    ("PriorityClass", "description"): ("inert", "descriptive"),
    ("PriorityClass", "preemptionPolicy"): (
        "warned",
        "Never is kube-scheduler's; Kueue and Berth preempt by ClusterQueue policy",
    ),
    ("Namespace", "spec"): ("inert", "Kubernetes'; only the labels are read"),
    ("AdmissionCheck", "spec.controllerName"): (
        "honoured",
        "answered on the bus (docs/events.md); a ProvisioningRequest one is refused",
    ),
    ("AdmissionCheck", "spec.retryDelayMinutes"): ("inert", "deprecated in Kueue, unused"),
    ("AdmissionCheck", "spec.parameters"): (
        "warned",
        "Berth passes no parameters to the check's controller",
    ),
    ("AdmissionCheck", "spec.parameters.apiGroup"): ("warned", "see spec.parameters"),
    ("AdmissionCheck", "spec.parameters.kind"): ("warned", "see spec.parameters"),
    ("AdmissionCheck", "spec.parameters.name"): ("warned", "see spec.parameters"),
}
# A warned field set to its default changes nothing, so it is not named.
_QUIET: dict[tuple[str, str], object] = {
    ("PriorityClass", "preemptionPolicy"): "PreemptLowerPriority",
}

# Kueue kinds Berth accepts and does not act on: kind -> (apiVersions, why).
_KUEUE = frozenset({"kueue.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"})
UNSUPPORTED_KINDS: dict[str, tuple[frozenset[str], str]] = {
    "ProvisioningRequestConfig": (_KUEUE, "needs a cluster autoscaler, not supported yet"),
    "Topology": (_KUEUE, "topology-aware scheduling is not supported"),
    "MultiKueueConfig": (_KUEUE, "MultiKueue is not supported"),
    "MultiKueueCluster": (_KUEUE, "MultiKueue is not supported"),
}


def unsupported_object(document: dict[str, Any]) -> str | None:
    """Why ``document`` is a Kueue object Berth accepts and skips, or None if it is not one.
    (An AdmissionCheck is a config kind; a ProvisioningRequest one is refused at parse.)"""
    kind = document.get("kind")
    entry = UNSUPPORTED_KINDS.get(kind) if isinstance(kind, str) else None
    if entry is None or document.get("apiVersion") not in entry[0]:
        return None
    return entry[1]


def field_paths(struct: type[msgspec.Struct]) -> list[str]:
    """Every configuration field of ``struct`` as a dotted path of wire names (lists and
    optional values looked through), in declaration order."""
    return list(_walk(msgspec.inspect.type_info(struct), ""))


def _walk(info: msgspec.inspect.Type, prefix: str) -> Iterator[str]:
    if isinstance(info, msgspec.inspect.StructType):
        if prefix and info.cls in _LEAVES:
            return
        for field in info.fields:
            if not prefix and field.encode_name in _SKIPPED:
                continue
            path = f"{prefix}{field.encode_name}"
            nested = list(_walk(field.type, f"{path}."))
            # A struct field whose own fields are all listed is a row too: it can be set.
            if not (path == "spec" and nested):
                yield path
            yield from nested
    elif isinstance(info, msgspec.inspect.UnionType):
        for option in info.types:
            yield from _walk(option, prefix)
    elif isinstance(info, msgspec.inspect.ListType):
        yield from _walk(info.item_type, prefix)


def warned_fields(document: dict[str, Any]) -> list[str]:
    """The warned fields ``document`` sets (not empty, not the quiet default), as paths."""
    kind = document.get("kind")
    found: list[str] = []
    for (row_kind, path), (status, _) in FIELD_STATUS.items():
        if row_kind != kind or status != "warned":
            continue
        if any(path.startswith(f"{other}.") for other in found):
            continue  # the parent is named already
        values = _values(document, path.split("."))
        quiet = _QUIET.get((row_kind, path), object())
        if any(value not in (None, [], {}, "") and value != quiet for value in values):
            found.append(path)
    return found


def _values(value: Any, steps: list[str]) -> list[Any]:
    """The values at ``steps`` under ``value``, looking through lists."""
    if isinstance(value, list):
        return [found for item in value for found in _values(item, steps)]
    if not steps:
        return [value]
    if not isinstance(value, dict):
        return []
    return _values(value.get(steps[0]), steps[1:])


def render_markdown() -> str:
    """``docs/kueue-fields.md``: one table per kind, every field with its status."""
    lines = [
        "# Kueue fields in Berth",
        "",
        "<!-- Generated by `python -m berth_cli.config_fields > docs/kueue-fields.md`;"
        " tests/test_kueue_fields.py fails when it drifts. -->",
        "",
        "Berth reads Kueue's objects unchanged. Each field is **honoured** (acted on as Kueue",
        "does), **warned** (accepted; `berth apply` names it on stderr, one line per field:",
        "`berth: warning: <file>: ClusterQueue cq: spec.admissionChecks is not supported and",
        "is ignored`) or **inert** (Kueue does not act on it either). A field that is in none",
        "of Kueue's releases is refused with its path, so a typo never passes silently.",
        "",
    ]
    for kind, struct in KINDS.items():
        lines += [f"## {kind}", "", "| field | status | notes |", "| --- | --- | --- |"]
        for path in field_paths(struct):
            status, note = FIELD_STATUS[(kind, path)]
            lines.append(f"| `{path}` | {status} | {note} |")
        lines.append("")
    lines += [
        "## Kueue objects Berth accepts and skips",
        "",
        "Each is accepted by `berth apply` with one warning and otherwise ignored.",
        "",
        "| kind | why |",
        "| --- | --- |",
    ]
    for kind, (_, why) in UNSUPPORTED_KINDS.items():
        lines.append(f"| {kind} | {why} |")
    lines += [
        "",
        "An AdmissionCheck whose `controllerName` is `kueue.x-k8s.io/provisioning-request`",
        "(ProvisioningRequest) is refused: it needs a cluster autoscaler, not supported yet.",
        "Topology-aware scheduling and MultiKueue are not supported.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
