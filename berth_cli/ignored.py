"""What Berth accepts in a file and does not act on, said once per field.

``berth apply``, ``berth submit`` and ``berth jobs launch`` take Kueue's and SkyPilot's files
unchanged; a field they accept but that changes nothing in Berth is not silently dropped: each
is one line on stderr, ``berth: warning: <file>: <field> is not supported and is ignored``.

What counts (a field any backend would act on in Kueue, and Berth does not):

- configuration: every field :data:`berth_cli.config_fields.FIELD_STATUS` marks warned (the table
  of docs/kueue-fields.md), named with its object, and Kueue's objects Berth has no model for
  (AdmissionCheck, Topology, MultiKueue...), each skipped with one line saying why;
- workloads: Kueue's topology, elastic-job, fast-admission, retriable-in-group,
  prebuilt-workload and ProvisioningRequest labels and annotations,
  on the object or on a pod template, and ``spec.managedBy`` (MultiKueue);
- managed jobs: the fields listed by the task parser (:attr:`ManagedJobSpec.ignored`).

A kind Berth does not take at all is refused, in one line saying why (:func:`unsupported`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from berth_cli.config_fields import unsupported_object, warned_fields
from shared.workload_fields import path_text
from shared.workloads import WorkloadError, workload_spec

__all__ = ["config_ignored", "warn_ignored", "warn_skipped", "workload_ignored"]

# Kueue's labels and annotations that Berth accepts on a workload and does not act on.
_KUEUE_KEYS = frozenset(
    {
        "kueue.x-k8s.io/podset-required-topology",
        "kueue.x-k8s.io/podset-preferred-topology",
        "kueue.x-k8s.io/podset-unconstrained-topology",
        "kueue.x-k8s.io/podset-slice-required-topology",
        "kueue.x-k8s.io/podset-slice-size",
        "kueue.x-k8s.io/podset-group-name",
        "kueue.x-k8s.io/elastic-job",
        "kueue.x-k8s.io/pod-group-fast-admission",
        "kueue.x-k8s.io/retriable-in-group",
        "kueue.x-k8s.io/prebuilt-workload-name",
        "kueue.x-k8s.io/admission-gated-by",
    }
)
_KUEUE_PREFIXES = ("provreq.kueue.x-k8s.io/",)

_DRA = "dynamic resource allocation (DRA) is not supported"
_NOT_QUEUED = "not a kind Berth queues; a workload of Kueue's pod integration: submit its Pods"
_KUBECTL = "not a workload nor Kueue configuration: create it with kubectl"
# Kinds Kueue's users write that Berth does not take, and why (Kueue's own configuration
# objects Berth has no model for are skipped with a warning instead: warn_skipped).
_UNSUPPORTED = {
    "ResourceClaimTemplate": _DRA,
    "ResourceClaim": _DRA,
    "DeviceClass": _DRA,
    "CronJob": "Berth queues Jobs, not the schedule that makes them: submit the Job",
    "RayService": "a RayService serves without end; Berth queues RayClusters and RayJobs",
    "SparkApplication": _NOT_QUEUED,
    "Workflow": _NOT_QUEUED,
    "PipelineRun": _NOT_QUEUED,
    "Pipeline": _NOT_QUEUED,
    "Task": _NOT_QUEUED,
    "Sandbox": _NOT_QUEUED,
    "TrainJob": _NOT_QUEUED,
    "MXJob": "MXJob is retired from Kubeflow's training operator; Berth takes its other jobs",
    **{
        kind: _KUBECTL
        for kind in (
            "ConfigMap",
            "Secret",
            "Service",
            "ServiceAccount",
            "PersistentVolumeClaim",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
    },
}


def warn_ignored(source: str, fields: Iterable[str]) -> None:
    """One warning line on stderr per field (in order, each once)."""
    for field in dict.fromkeys(fields):
        click.echo(f"berth: warning: {source}: {field} is not supported and is ignored", err=True)


def warn_skipped(source: str, documents: list[dict[str, Any]]) -> None:
    """One warning line on stderr per Kueue object Berth accepts and skips, saying why."""
    for document in documents:
        why = unsupported_object(document)
        if why is not None:
            what = f"{document['kind']} {_name(document)}"
            click.echo(f"berth: warning: {source}: {what}: {why}; the object is ignored", err=True)


def unsupported(kind: object) -> str | None:
    """Why Berth does not take objects of this kind (None: it does, or knows nothing of it)."""
    return _UNSUPPORTED.get(kind) if isinstance(kind, str) else None


def config_ignored(document: dict[str, Any]) -> list[str]:
    """The configuration fields of ``document`` that Berth accepts and does not act on, each
    named with its object (``ClusterQueue cq: spec.admissionChecks``)."""
    fields = warned_fields(document)
    return [f"{document.get('kind')} {_name(document)}: {f}" for f in fields]


def _name(document: dict[str, Any]) -> str:
    metadata = document.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, dict) else ""


def workload_ignored(document: dict[str, Any]) -> list[str]:
    """The workload fields of ``document`` that Berth accepts and does not act on: Kueue's
    labels and annotations on the object and its pod templates, and ``spec.managedBy``."""
    found = _metadata_keys(document.get("metadata"), "metadata")
    spec = document.get("spec")
    if isinstance(spec, dict) and spec.get("managedBy"):
        found.append("spec.managedBy")
    try:
        templates = workload_spec(document).templates
    except WorkloadError:
        return found  # refused elsewhere, with its reason
    for template in templates:
        parent: Any = document
        for step in template.path[:-1]:
            parent = parent[step]
        if parent is not document:  # a Pod is its own template
            where = path_text(template.path[:-1])
            found += _metadata_keys(parent.get("metadata"), f"{where}.metadata")
    return found


def _metadata_keys(metadata: Any, where: str) -> list[str]:
    if not isinstance(metadata, dict):
        return []
    found = []
    for section in ("labels", "annotations"):
        values = metadata.get(section)
        for key in values if isinstance(values, dict) else ():
            if key in _KUEUE_KEYS or str(key).startswith(_KUEUE_PREFIXES):
                found.append(f"{where}.{section}.{key}")
    return found
