"""Which of a task's candidates runs: the rule, in :func:`choose`.

SkyPilot chooses among ``any_of`` candidates by price and among ``ordered`` ones by the
order written, trying each cloud in turn. Berth has one cloud, a Kubernetes cluster behind
a ClusterQueue, and no prices, so it takes candidates in the order written for both, and
asks the ClusterQueue the task's LocalQueue points to (its flavors and quotas, from the
configuration `berth apply` stored) which one it can satisfy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from berth_cli.tasks.fields import Fail
from berth_cli.tasks.resources import Candidate

__all__ = ["Flavor", "choose", "fits"]


@dataclass(frozen=True)
class Flavor:
    """One flavor of a ClusterQueue: its node labels and, per resource it covers there, the
    quota it may use (nominal, plus its borrowing limit when it has one)."""

    name: str
    node_labels: dict[str, str]
    quotas: dict[str, int]  # resource -> milli-units


def _tokens(text: str) -> set[str]:
    return {token for token in re.split(r"[^a-z0-9]+", text.lower()) if token}


def _names(flavor: Flavor, model: str) -> bool:
    """Whether a flavor says it has this accelerator model: its name or a node label value
    (``nvidia-l4``, ``NVIDIA-A100-SXM4-80GB``) has the model as a word."""
    words = _tokens(flavor.name)
    for value in flavor.node_labels.values():
        words |= _tokens(value)
    return model.lower() in words


def fits(candidate: Candidate, nodes: int, flavors: list[Flavor], models: set[str]) -> bool:
    """Whether the ClusterQueue can satisfy the candidate: each resource it requests (cpu,
    memory, its accelerator's resource), times ``nodes``, within the quota of one flavor that
    covers it; for the accelerator, a flavor that names its model if any of the queue's
    flavors for that resource names one of the task's ``models``."""
    needs: dict[str, int] = {}
    if candidate.cpu_milli is not None:
        needs["cpu"] = candidate.cpu_milli * nodes
    if candidate.memory_bytes is not None:
        needs["memory"] = candidate.memory_bytes * 1000 * nodes
    for resource, amount in needs.items():
        if not any(flavor.quotas.get(resource, -1) >= amount for flavor in flavors):
            return False
    if candidate.accelerator is None:
        return True
    amount = candidate.count * 1000 * nodes
    covering = [flavor for flavor in flavors if candidate.device in flavor.quotas]
    if any(_names(flavor, model) for flavor in covering for model in models):
        covering = [flavor for flavor in covering if _names(flavor, candidate.accelerator)]
    return any(flavor.quotas[candidate.device] >= amount for flavor in covering)


def choose(candidates: list[Candidate], nodes: int, flavors: list[Flavor] | None) -> Candidate:
    """The candidate that runs: the first, in the order written, that can run on Kubernetes
    and that the task's ClusterQueue can satisfy (:func:`fits`). When the ClusterQueue is
    not known (``flavors`` None) or satisfies none, the first that can run on Kubernetes (it
    then waits, or fails its prechecks with admission's reason). If none can, the first
    one's reason is the error."""
    runnable = [c for c in candidates if c.refused is None]
    if not runnable:
        first = candidates[0]
        raise Fail(first.refused_path or first.path, str(first.refused))
    if flavors is None or len(runnable) == 1:
        return runnable[0]
    models = {c.accelerator for c in runnable if c.accelerator is not None}
    return next((c for c in runnable if fits(c, nodes, flavors, models)), runnable[0])
