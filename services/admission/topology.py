"""What the configuration says, indexed for the admission core.

Built whole from the config objects on every config change (nothing in here changes between
changes, except the quota tree's usage, which the core adds back and keeps current): the
ResourceFlavors, ClusterQueues and LocalQueues, namespace labels, priority classes, the cohort
tree with each ClusterQueue's root, which queues are inactive or draining, and
``Configuration.spec.admission``.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.admission.admission_checks import CheckGate
from services.admission.deadlines import WaitTargets
from services.admission.fairness import Fairness
from services.admission.flavors import ClusterQueueInfo, FlavorInfo
from services.admission.model import LocalQueueKey
from services.admission.priorities import PriorityTable
from shared.config import (
    ClusterQueue,
    Cohort,
    ConfigObject,
    Configuration,
    LocalQueue,
    Namespace,
    ResourceFlavor,
)
from shared.quota import QuotaTree

__all__ = ["Topology"]

_NAME_LABEL = "kubernetes.io/metadata.name"


class Topology:
    """The configuration as the core reads it; empty until built from config objects."""

    def __init__(self) -> None:
        self.flavors: dict[str, FlavorInfo] = {}
        self.cqs: dict[str, ClusterQueueInfo] = {}
        self.lqs: dict[LocalQueueKey, LocalQueue] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.priorities = PriorityTable()
        self.tree = QuotaTree()
        self.cohort_members: dict[str, list[str]] = {}  # root node name -> its ClusterQueues
        self.root_of: dict[str, str] = {}  # cq -> root node name
        self.inactive: dict[str, tuple[str, str]] = {}  # cq -> (reason, message)
        self.draining_cqs: set[str] = set()
        self.draining_lqs: set[LocalQueueKey] = set()
        # Configuration.spec.admission.borrowingYieldsToHigherPriority.
        self.borrowing_yields = False
        # Configuration.spec.admission.waitTargets: deadline order when set.
        self.wait_targets = WaitTargets()
        self.fairness = Fairness()  # fairSharing, admissionFairSharing (services/admission)
        self._ns_match: dict[tuple[str, str], bool] = {}

    @classmethod
    def build(cls, objects: Iterable[ConfigObject]) -> Topology:
        objects = list(objects)
        self = cls()
        cluster_queues = [o for o in objects if isinstance(o, ClusterQueue)]
        configurations = [o for o in objects if isinstance(o, Configuration)]
        admission = configurations[0].spec.admission if configurations else None
        self.borrowing_yields = admission is not None and (
            admission.borrowing_yields_to_higher_priority
        )
        self.wait_targets = WaitTargets(admission.wait_targets if admission else ())
        self.fairness = Fairness.build(objects)
        cohorts = [o for o in objects if isinstance(o, Cohort)]
        self.flavors = {
            o.metadata.name: FlavorInfo.from_config(o)
            for o in objects
            if isinstance(o, ResourceFlavor)
        }
        self.cqs = {
            cq.metadata.name: ClusterQueueInfo.from_config(cq, self.flavors)
            for cq in cluster_queues
        }
        self.lqs = {
            (o.metadata.namespace or "default", o.metadata.name): o
            for o in objects
            if isinstance(o, LocalQueue)
        }
        self.namespaces = {o.metadata.name: o.labels for o in objects if isinstance(o, Namespace)}
        self.priorities = PriorityTable.from_config(objects)
        self.tree = QuotaTree.build(cluster_queues, cohorts)
        for name, node in self.tree.cluster_queues.items():
            root = node.root().name
            self.root_of[name] = root
            self.cohort_members.setdefault(root, []).append(name)
        # HoldAndDrain: what such a queue has admitted must be evicted (Scheduler.draining).
        self.draining_cqs = {
            cq.metadata.name for cq in cluster_queues if cq.spec.stop_policy == "HoldAndDrain"
        }
        self.draining_lqs = {
            key for key, lq in self.lqs.items() if lq.spec.stop_policy == "HoldAndDrain"
        }
        checks = CheckGate()  # a missing or inactive AdmissionCheck makes its queue inactive
        checks.set_config(objects)
        for name, info in self.cqs.items():
            problem = self._inactive_reason(info)
            if problem is None and (check := checks.problem(name)) is not None:
                problem = check[0], f"Can't admit new workloads: {check[1]}."
            if problem is not None:
                self.inactive[name] = problem
        return self

    def _inactive_reason(self, info: ClusterQueueInfo) -> tuple[str, str] | None:
        """Kueue's ClusterQueue Active=False reason and message, or None when active."""
        reasons: list[str] = []
        messages: list[str] = []
        if info.stopped:
            reasons.append("Stopped")
            messages.append("is stopped")
        if info.missing_flavors:
            reasons.append("FlavorNotFound")
            messages.append(f"references missing ResourceFlavor(s): {info.missing_flavors}")
        if self.tree.in_cycle(info.name):
            reasons.append("CohortHasCycle")
            messages.append("cohort has a cycle")
        if not reasons:
            return None
        return reasons[0], f"Can't admit new workloads: {', '.join(messages)}."

    def root(self, cq_name: str) -> str:
        """The root cohort of a ClusterQueue (itself when it has no cohort)."""
        return self.root_of.get(cq_name, cq_name)

    def namespace_matches(self, info: ClusterQueueInfo, namespace: str) -> bool:
        """Whether the ClusterQueue's namespaceSelector admits workloads of ``namespace``."""
        cache_key = (info.name, namespace)
        cached = self._ns_match.get(cache_key)
        if cached is None:
            selector = info.namespace_selector
            labels = self.namespaces.get(namespace) or {_NAME_LABEL: namespace}
            cached = selector is not None and selector.matches(labels)
            self._ns_match[cache_key] = cached
        return cached
