"""The processes that stand for a workload's pods on this machine (pure: no I/O)."""

from __future__ import annotations

from typing import Any

import msgspec

from services.watcher.local.processes import pod_commands
from services.watcher.local.run_files import LocalPod
from shared.events import PodSet, WorkloadAdmitted
from shared.pod_groups import POD_GROUP_KIND

__all__ = ["LocalPod", "local_pods"]


def local_pods(
    obj: dict[str, Any],
    pod_sets: list[PodSet],
    pod_specs: dict[str, dict[str, Any]],
    event: WorkloadAdmitted,
) -> list[LocalPod]:
    """The processes that stand for a workload's pods on this machine.

    A RayJob is one process: its ``entrypoint`` as a shell command, as the submitter pod
    would run it; its head and workers only hold quota. A pod group runs each of its Pods,
    named as they are. Every other kind runs each pod of each pod set (as admitted), its
    pod template's first container.
    """
    if obj.get("kind") == "RayJob":
        entrypoint = str((obj.get("spec") or {}).get("entrypoint") or "")
        return [("submitter-0", ["sh", "-c", entrypoint] if entrypoint else [], {}, None)]
    if obj.get("kind") == POD_GROUP_KIND:
        members = (obj.get("spec") or {}).get("pods") or []
        return [
            (str(pod["metadata"]["name"]), *_with_index(pod_commands(pod.get("spec") or {}), i))
            for i, pod in enumerate(members)
        ]
    pods: list[LocalPod] = []
    for pod_set in _admitted_pod_sets(pod_sets, event):
        argv, env, cwd = pod_commands(pod_specs[pod_set.name])
        for index in range(pod_set.count):
            env_for_pod = {**env, "BERTH_POD_INDEX": str(index), "JOB_COMPLETION_INDEX": str(index)}
            pods.append((f"{pod_set.name}-{index}", argv, env_for_pod, cwd))
    return pods


def _with_index(
    command: tuple[list[str], dict[str, str], str | None], index: int
) -> tuple[list[str], dict[str, str], str | None]:
    argv, env, cwd = command
    return argv, {**env, "BERTH_POD_INDEX": str(index)}, cwd


def _admitted_pod_sets(pod_sets: list[PodSet], event: WorkloadAdmitted) -> list[PodSet]:
    """The pod sets with the counts admission granted (partial admission may lower them)."""
    counts = {assignment.pod_set: assignment.count for assignment in event.assignments}
    return [
        msgspec.structs.replace(pod_set, count=counts.get(pod_set.name, pod_set.count))
        for pod_set in pod_sets
    ]
