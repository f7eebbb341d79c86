"""Every workload kind Berth queues, and where each keeps its pods: the one table.

Each kind has one function from its ``spec`` to its pod templates, whose docstring states the
mapping Kueue uses (``pkg/controller/jobs/<kind>`` in kubernetes-sigs/kueue): a pod set's
name, its count, and where its pod spec lives (``path``, which the Kubernetes backend patches
when it injects a flavor's node labels). :func:`shared.workloads.workload_spec` turns the
templates into pod sets and requests; nothing else knows a kind's layout.

How an object is held until admission (:attr:`Kind.hold`), as Kueue holds it:

- ``suspend``: the kind has a suspend field (:attr:`Kind.suspend_path`); created true,
  admission sets it false, eviction sets it true again (Job, JobSet, RayJob, RayCluster,
  AppWrapper; the Kubeflow jobs under ``spec.runPolicy.suspend``);
- ``gates``: its pods carry the ``kueue.x-k8s.io/admission`` scheduling gate, which admission
  removes; eviction deletes the pods (a Pod, a pod group, a Deployment's, a StatefulSet's or a
  LeaderWorkerSet's pods, which their controller then creates again, gated).

Pod groups (plain Pods labelled ``kueue.x-k8s.io/pod-group-name``) are one workload, a
``PodGroup``: see :mod:`shared.pod_groups`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from shared.pod_groups import POD_GROUP_API, POD_GROUP_KIND, pod_group_templates
from shared.workload_fields import (
    Path,
    PodTemplate,
    WorkloadError,
    int_field,
    list_field,
    mapping,
    pod_spec_at,
    show,
)

__all__ = ["KINDS", "Kind", "PodTemplate", "resource_name"]

JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"


Templates = Callable[[dict[str, Any], dict[str, Any]], list[PodTemplate]]


@dataclass(frozen=True)
class Kind:
    kind: str
    api_versions: frozenset[str]
    group: str  # the API group ("" for the core group)
    plural: str
    hold: Literal["suspend", "gates"]
    templates: Templates  # (object, its spec) -> pod templates
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    submittable: bool = True  # False: built by the watcher, never submitted (PodGroup)


def resource_name(kind: str) -> str:
    """kubectl's name for a kind's objects: ``job.batch``, ``pod``, ``jobset.jobset.x-k8s.io``."""
    entry = KINDS.get(kind)
    if entry is None or not entry.group:
        return kind.lower()
    return f"{kind.lower()}.{entry.group}"


# --- one function per kind ------------------------------------------------------------------


def _job(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """batch/v1 Job: one pod set ``main`` of ``min(parallelism, completions)`` pods; with
    Kueue's ``kueue.x-k8s.io/job-min-parallelism`` annotation it may be admitted with fewer
    (partial admission, down to that many)."""
    template = pod_spec_at(spec, "spec")
    count = _job_pods(spec, "spec")
    if count == 0:
        raise WorkloadError("`spec.parallelism` is 0: Berth admits Jobs of at least one pod")
    annotations = mapping((obj.get("metadata") or {}).get("annotations"), "metadata.annotations")
    minimum = annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    min_count = None
    if minimum is not None:
        path = f"metadata.annotations.{JOB_MIN_PARALLELISM_ANNOTATION}"
        if not isinstance(minimum, str) or not minimum.isdigit() or not 0 < int(minimum) < count:
            raise WorkloadError(f"`{path}` must be a whole number from 1 to {count - 1}")
        min_count = int(minimum)
    return [PodTemplate("main", count, template, ("spec", "template", "spec"), min_count)]


def _job_pods(job_spec: dict[str, Any], path: str) -> int:
    parallelism = int_field(job_spec.get("parallelism"), f"{path}.parallelism", 1)
    completions = job_spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, int_field(completions, f"{path}.completions", 1))
    return parallelism


def _pod(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """v1 Pod: one pod set ``main`` of one pod, the Pod itself (in a pod group: see
    :func:`_pod_group`)."""
    return [PodTemplate("main", 1, spec, ("spec",))]


def _ray_job(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """ray.io RayJob: its ``rayClusterSpec`` as a RayCluster (:func:`_ray_cluster`)."""
    cluster = spec.get("rayClusterSpec")
    if not isinstance(cluster, dict):
        raise WorkloadError("`spec.rayClusterSpec` is missing")
    return _ray_groups(cluster, ("spec", "rayClusterSpec"))


def _ray_cluster(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """ray.io RayCluster: pod set ``head`` (one pod), then one per worker group named by its
    ``groupName``, of ``replicas x numOfHosts`` pods, at least ``minReplicas x numOfHosts``
    (partial admission); a group of no replicas holds no quota."""
    return _ray_groups(spec, ("spec",))


def _ray_groups(cluster: dict[str, Any], base: Path) -> list[PodTemplate]:
    where = ".".join(str(part) for part in base)
    head = pod_spec_at(cluster.get("headGroupSpec"), f"{where}.headGroupSpec")
    result = [PodTemplate("head", 1, head, (*base, "headGroupSpec", "template", "spec"))]
    groups = list_field(cluster.get("workerGroupSpecs"), f"{where}.workerGroupSpecs")
    for index, group in enumerate(groups):
        path = f"{where}.workerGroupSpecs[{index}]"
        template = pod_spec_at(group, path)
        replicas = int_field(group.get("replicas"), f"{path}.replicas", 1)
        hosts = int_field(group.get("numOfHosts"), f"{path}.numOfHosts", 1) or 1
        min_replicas = group.get("minReplicas")
        min_count = (
            None if min_replicas is None else int_field(min_replicas, f"{path}.minReplicas", 0)
        )
        if min_count is not None and min_count > replicas:
            raise WorkloadError(f"`{path}.minReplicas` ({min_count}) exceeds replicas ({replicas})")
        name = group.get("groupName") or f"workers-{index}"
        if not isinstance(name, str) or name in {t.name for t in result}:
            raise WorkloadError(f"`{path}.groupName` {show(name)} must be a unique string")
        result.append(
            PodTemplate(
                name,
                replicas * hosts,
                template,
                (*base, "workerGroupSpecs", index, "template", "spec"),
                None if min_count is None else min_count * hosts,
            )
        )
    return result


def _job_set(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """jobset.x-k8s.io JobSet: one pod set per replicatedJob, named after it, of
    ``replicas x min(parallelism, completions)`` pods of its Job template."""
    jobs = list_field(spec.get("replicatedJobs"), "spec.replicatedJobs")
    if not jobs:
        raise WorkloadError("`spec.replicatedJobs` must list at least one replicated job")
    result: list[PodTemplate] = []
    for index, replicated in enumerate(jobs):
        path = f"spec.replicatedJobs[{index}]"
        replicated = mapping(replicated, path)
        name = replicated.get("name")
        if not isinstance(name, str) or not name or name in {t.name for t in result}:
            raise WorkloadError(f"`{path}.name` {show(name)} must be a unique, non-empty string")
        replicas = int_field(replicated.get("replicas"), f"{path}.replicas", 1)
        job_template = mapping(replicated.get("template"), f"{path}.template")
        job_spec = mapping(job_template.get("spec"), f"{path}.template.spec")
        template = pod_spec_at(job_spec, f"{path}.template.spec")
        count = replicas * _job_pods(job_spec, f"{path}.template.spec")
        where: Path = ("spec", "replicatedJobs", index, "template", "spec", "template", "spec")
        result.append(PodTemplate(name, count, template, where))
    return result


def _kubeflow(field: str, order: tuple[str, ...]) -> Templates:
    def templates(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
        replica_specs = mapping(spec.get(field), f"spec.{field}")
        for replica_type in replica_specs:
            if replica_type not in order:
                raise WorkloadError(
                    f"`spec.{field}.{replica_type}` is not a replica type of {obj.get('kind')}"
                    f" (known: {', '.join(order)})"
                )
        result = []
        for replica_type in order:
            if replica_specs.get(replica_type) is None:
                continue
            path = f"spec.{field}.{replica_type}"
            replica = mapping(replica_specs[replica_type], path)
            count = int_field(replica.get("replicas"), f"{path}.replicas", 1)
            template = pod_spec_at(replica, path)
            where: Path = ("spec", field, replica_type, "template", "spec")
            result.append(PodTemplate(replica_type.lower(), count, template, where))
        if not result:
            raise WorkloadError(f"`spec.{field}` names no replica type (known: {', '.join(order)})")
        return result

    templates.__doc__ = (
        f"kubeflow.org: one pod set per replica type of ``spec.{field}``, in Kueue's order"
        f" ({', '.join(order)}), named in lower case, of ``replicas`` pods (default 1)."
    )
    return templates


def _leader_worker_set(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """leaderworkerset.x-k8s.io LeaderWorkerSet: with a leader template, pod sets ``leader``
    (``replicas`` pods) and ``worker`` (``replicas x (size - 1)``); without, ``main``
    (``replicas x size``). Kueue admits each replica group as a workload of its own; Berth
    admits the whole set as one."""
    replicas = int_field(spec.get("replicas"), "spec.replicas", 1)
    template = mapping(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    size = int_field(template.get("size"), "spec.leaderWorkerTemplate.size", 1) or 1
    base = ("spec", "leaderWorkerTemplate")
    worker = mapping(template.get("workerTemplate"), "spec.leaderWorkerTemplate.workerTemplate")
    worker_spec = worker.get("spec")
    if not isinstance(worker_spec, dict):
        raise WorkloadError("`spec.leaderWorkerTemplate.workerTemplate.spec` is missing")
    leader = template.get("leaderTemplate")
    if leader is None:
        path = (*base, "workerTemplate", "spec")
        return [PodTemplate("main", replicas * size, worker_spec, path)]
    leader_spec = mapping(leader, "spec.leaderWorkerTemplate.leaderTemplate").get("spec")
    if not isinstance(leader_spec, dict):
        raise WorkloadError("`spec.leaderWorkerTemplate.leaderTemplate.spec` is missing")
    return [
        PodTemplate("leader", replicas, leader_spec, (*base, "leaderTemplate", "spec")),
        PodTemplate(
            "worker", replicas * (size - 1), worker_spec, (*base, "workerTemplate", "spec")
        ),
    ]


def _replicated(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """apps/v1 Deployment or StatefulSet: one pod set ``main`` of ``replicas`` pods (default
    1), admitted as one pod group, all or nothing. (Kueue groups a StatefulSet's pods so; a
    Deployment's pods it admits one by one.)"""
    replicas = int_field(spec.get("replicas"), "spec.replicas", 1)
    return [PodTemplate("main", replicas, pod_spec_at(spec, "spec"), ("spec", "template", "spec"))]


def _app_wrapper(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """workload.codeflare.dev AppWrapper: one pod set per pod template of its components, in
    order, named ``<name>-<index>`` as Kueue names them. A component's ``podSets`` say where
    (``path``, e.g. ``template.spec.template``) and how many (``replicas``, default 1); a
    component without them is read as its own kind is (it must be one of this table's)."""
    components = list_field(spec.get("components"), "spec.components")
    if not components:
        raise WorkloadError("`spec.components` must list at least one component")
    name = str((obj.get("metadata") or {}).get("name") or "appwrapper")
    result: list[PodTemplate] = []
    for index, component in enumerate(components):
        path = f"spec.components[{index}]"
        component = mapping(component, path)
        template = mapping(component.get("template"), f"{path}.template")
        declared = list_field(component.get("podSets"), f"{path}.podSets")
        found: list[tuple[int, dict[str, Any], Path]] = []
        for number, pod_set in enumerate(declared):
            where = f"{path}.podSets[{number}]"
            pod_set = mapping(pod_set, where)
            replicas = int_field(pod_set.get("replicas"), f"{where}.replicas", 1)
            steps = _component_path(pod_set.get("path"), f"{where}.path")
            pod_template = _follow(component, steps, f"{where}.path")
            pod_spec = mapping(pod_template, f"{where}.path").get("spec")
            if not isinstance(pod_spec, dict):
                raise WorkloadError(f"`{where}.path` does not lead to a pod template")
            found.append((replicas, pod_spec, ("spec", "components", index, *steps, "spec")))
        if not declared:
            kind = KINDS.get(str(template.get("kind")))
            if kind is None or not kind.submittable or kind.kind == "AppWrapper":
                raise WorkloadError(
                    f"`{path}.podSets` is needed: Berth cannot find the pods of a"
                    f" {show(template.get('kind'))}"
                )
            inner = mapping(template.get("spec"), f"{path}.template.spec")
            for pod_template in kind.templates(template, inner):
                steps = ("spec", "components", index, "template", *pod_template.path)
                found.append((pod_template.count, pod_template.spec, steps))
        for count, pod_spec, where_in_object in found:
            result.append(PodTemplate(f"{name}-{len(result)}", count, pod_spec, where_in_object))
    return result


_STEP = re.compile(r"^([A-Za-z0-9_]+)((?:\[\d+\])*)$")


def _component_path(value: Any, path: str) -> Path:
    """AppWrapper's path syntax, ``template.spec.replicatedJobs[0].template``, as steps."""
    if not isinstance(value, str) or not value:
        raise WorkloadError(f"`{path}` must be a path such as 'template.spec.template'")
    steps: list[str | int] = []
    for part in value.split("."):
        match = _STEP.match(part)
        if match is None:
            raise WorkloadError(f"`{path}`: {show(value)} is not a path")
        steps.append(match.group(1))
        steps += [int(i) for i in re.findall(r"\[(\d+)\]", match.group(2))]
    return tuple(steps)


def _follow(value: Any, steps: Path, path: str) -> Any:
    for step in steps:
        if isinstance(step, int):
            value = value[step] if isinstance(value, list) and step < len(value) else None
        else:
            value = value.get(step) if isinstance(value, dict) else None
        if value is None:
            raise WorkloadError(f"`{path}` leads nowhere (no {show(step)})")
    return value


# --- the table --------------------------------------------------------------------------------

_RUN_POLICY = ("spec", "runPolicy", "suspend")  # Kubeflow's suspend field


def _kubeflow_kind(kind: str, version: str, field: str, order: tuple[str, ...]) -> Kind:
    plural = f"{kind.lower()}s"
    templates = _kubeflow(field, order)
    return Kind(
        kind, frozenset({version}), "kubeflow.org", plural, "suspend", templates, _RUN_POLICY
    )


_RAY = frozenset({"ray.io/v1", "ray.io/v1alpha1"})
KINDS: dict[str, Kind] = {
    kind.kind: kind
    for kind in (
        Kind("Job", frozenset({"batch/v1"}), "batch", "jobs", "suspend", _job),
        Kind("Pod", frozenset({"v1"}), "", "pods", "gates", _pod),
        Kind("RayJob", _RAY, "ray.io", "rayjobs", "suspend", _ray_job),
        Kind("RayCluster", _RAY, "ray.io", "rayclusters", "suspend", _ray_cluster),
        Kind(
            "JobSet",
            frozenset({"jobset.x-k8s.io/v1alpha2"}),
            "jobset.x-k8s.io",
            "jobsets",
            "suspend",
            _job_set,
        ),
        _kubeflow_kind(
            "PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", ("Master", "Worker")
        ),
        _kubeflow_kind(
            "TFJob",
            "kubeflow.org/v1",
            "tfReplicaSpecs",
            ("Chief", "Master", "PS", "Worker", "Eval"),
        ),
        _kubeflow_kind("XGBoostJob", "kubeflow.org/v1", "xgbReplicaSpecs", ("Master", "Worker")),
        _kubeflow_kind("PaddleJob", "kubeflow.org/v1", "paddleReplicaSpecs", ("Master", "Worker")),
        _kubeflow_kind("JAXJob", "kubeflow.org/v1", "jaxReplicaSpecs", ("Worker",)),
        _kubeflow_kind("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", ("Launcher", "Worker")),
        Kind(
            "AppWrapper",
            frozenset({"workload.codeflare.dev/v1beta2"}),
            "workload.codeflare.dev",
            "appwrappers",
            "suspend",
            _app_wrapper,
        ),
        Kind(
            "LeaderWorkerSet",
            frozenset({"leaderworkerset.x-k8s.io/v1"}),
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
            "gates",
            _leader_worker_set,
        ),
        Kind("Deployment", frozenset({"apps/v1"}), "apps", "deployments", "gates", _replicated),
        Kind("StatefulSet", frozenset({"apps/v1"}), "apps", "statefulsets", "gates", _replicated),
        Kind(
            POD_GROUP_KIND,
            frozenset({POD_GROUP_API}),
            "berth.dev",
            "podgroups",
            "gates",
            pod_group_templates,
            submittable=False,
        ),
    )
}
