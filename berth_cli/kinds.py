"""The kinds the CLI names, and every word a user may name them by (kubectl's habits).

One table for `get`, `describe` and `delete`: singular, plural and short names (``wl``,
``cq``, ``lq``, ``rf``, ``wpc``...), in any case.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "RESOURCES",
    "WORKLOAD_OBJECT_WORDS",
    "Resource",
    "by_plural",
    "config_names",
    "kind_words",
    "resolve",
]


@dataclass(frozen=True)
class Resource:
    """A kind as the CLI shows it; ``config``: stored in the config bucket by `berth apply`
    (workloads are not, and `get` asks admission for queues' status)."""

    kind: str
    plural: str
    short: tuple[str, ...] = ()
    namespaced: bool = False
    config: bool = True

    @property
    def words(self) -> tuple[str, ...]:
        return (self.kind.lower(), self.plural, *self.short)


RESOURCES = (
    Resource("Workload", "workloads", ("wl",), namespaced=True, config=False),
    Resource("ClusterQueue", "clusterqueues", ("cq",)),
    Resource("LocalQueue", "localqueues", ("lq",), namespaced=True),
    Resource("ResourceFlavor", "resourceflavors", ("rf", "flavor", "flavors")),
    Resource("WorkloadPriorityClass", "workloadpriorityclasses", ("wpc",)),
    Resource("PriorityClass", "priorityclasses", ("pc",)),
    Resource("Cohort", "cohorts"),
    Resource("Namespace", "namespaces", ("ns",)),
    Resource("ClusterQueuePolicy", "clusterqueuepolicies", ("cqp",)),
    Resource("Configuration", "configurations"),
    Resource("AdmissionCheck", "admissionchecks", ("ac",)),
)

# `berth delete job NAME` deletes the workload of that Job (its object), as kubectl would.
WORKLOAD_OBJECT_WORDS = ("job", "jobs", "pod", "pods", "rayjob", "rayjobs")

_BY_WORD = {word: resource for resource in RESOURCES for word in resource.words}


def resolve(word: str) -> Resource | None:
    """The resource a user named by any of its words (singular, plural, short), any case."""
    return _BY_WORD.get(word.lower())


def by_plural(plural: str) -> Resource:
    """The resource of a plural the CLI itself names (``workloads``)."""
    return next(r for r in RESOURCES if r.plural == plural)


def config_names() -> dict[str, str]:
    """Every word for a config kind -> the kind (what `berth delete` accepts)."""
    return {word: r.kind for r in RESOURCES if r.config for word in r.words}


def kind_words() -> list[str]:
    """Every accepted word, for shell completion and error messages."""
    return sorted(_BY_WORD)
