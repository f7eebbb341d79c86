"""What the configuration says about fair sharing, and the status fields it adds.

- ``Configuration.spec.fairSharing.enable``: heads of the ClusterQueues of a cohort tree go
  by dominant resource share (:mod:`services.admission.fair_order`), and the status of every
  ClusterQueue and every Cohort object carries ``fairSharing.weightedShare``;
- ``Configuration.spec.admissionFairSharing`` with a ClusterQueue's ``admissionScope``: its
  workloads go by their LocalQueue's decayed consumption
  (:mod:`services.admission.admission_fair_sharing`), and each of its LocalQueues' status
  carries ``fairSharing.admissionFairSharingStatus``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from services.admission.admission_fair_sharing import Ledger
from services.admission.fair_order import Weights
from services.admission.flavors import fmt_quantity
from services.admission.model import LocalQueueKey
from shared.config import ClusterQueue, Cohort, ConfigObject, Configuration, LocalQueue
from shared.config_fairness import AdmissionFairSharingSettings
from shared.quantities import parse_quantity
from shared.quota import QuotaTree

__all__ = ["Fairness"]


class Fairness:
    """Fair-sharing settings of one configuration; empty (all off) until built."""

    def __init__(self) -> None:
        self.enabled = False  # Configuration.spec.fairSharing.enable
        self.weights = Weights((), ())
        self.settings: AdmissionFairSharingSettings | None = None
        self.usage_based: set[str] = set()  # ClusterQueues with admission fair sharing
        self._lq_weights: dict[LocalQueueKey, float] = {}
        self._lq_cq: dict[LocalQueueKey, str] = {}

    @classmethod
    def build(cls, objects: Iterable[ConfigObject]) -> Fairness:
        objects = list(objects)
        self = cls()
        configurations = [o for o in objects if isinstance(o, Configuration)]
        cluster_queues = [o for o in objects if isinstance(o, ClusterQueue)]
        spec = configurations[0].spec if configurations else None
        self.enabled = spec is not None and spec.fair_sharing.enable
        self.weights = Weights(cluster_queues, [o for o in objects if isinstance(o, Cohort)])
        self.settings = None if spec is None else spec.admission_fair_sharing
        if self.settings is not None:
            self.usage_based = {
                cq.metadata.name
                for cq in cluster_queues
                if cq.spec.admission_scope is not None
                and cq.spec.admission_scope.admission_mode == "UsageBasedAdmissionFairSharing"
            }
        for lq in objects:
            if isinstance(lq, LocalQueue):
                key = (lq.metadata.namespace or "default", lq.metadata.name)
                self._lq_cq[key] = lq.spec.cluster_queue
                if lq.spec.fair_sharing is not None:
                    self._lq_weights[key] = parse_quantity(lq.spec.fair_sharing.weight) / 1000
        return self

    def lq_weight(self, lq: LocalQueueKey) -> float:
        """A LocalQueue's ``fairSharing.weight`` (1 when unset or unknown, as Kueue)."""
        return self._lq_weights.get(lq, 1.0)

    def ledger(self, previous: Ledger | None) -> Ledger | None:
        """The consumption ledger under these settings, keeping ``previous``'s history."""
        if self.settings is None:
            return None
        if previous is None:
            return Ledger(self.settings)
        previous.configure(self.settings)
        return previous

    def share_of(self, tree: QuotaTree, name: str, *, cohort: bool = False) -> int | None:
        """The weightedShare now of a ClusterQueue (of a Cohort with ``cohort``), None with
        fair sharing off or no such node. Kueue's Usage and CohortStats: the node's dominant
        resource share (:func:`shared.fair_share.node_share`: what its subtree uses above
        its subtree quota, over what its parent could lend, divided by its own
        ``fairSharing.weight``), rounded up; 0 for a root, which borrows from nobody."""
        node = (tree.cohorts if cohort else tree.cluster_queues).get(name)
        if not self.enabled or node is None:
            return None
        return self.weights.share(node).rounded()

    def cluster_queue_status(self, tree: QuotaTree, name: str) -> dict[str, Any]:
        """``status.fairSharing`` of a ClusterQueue: its weightedShare, when enabled."""
        share = self.share_of(tree, name)
        return {} if share is None else {"fairSharing": {"weightedShare": share}}

    def cohort_status(self, tree: QuotaTree, name: str) -> dict[str, Any]:
        """``status.fairSharing`` of a Cohort: its weightedShare, when enabled (Kueue's
        cohort controller writes none with fair sharing off)."""
        share = self.share_of(tree, name, cohort=True)
        return {} if share is None else {"fairSharing": {"weightedShare": share}}

    def gauges(
        self, tree: QuotaTree, ledger: Ledger | None, now: float
    ) -> tuple[dict[str, int], dict[LocalQueueKey, float]]:
        """What the metrics show: every ClusterQueue's weightedShare (fair sharing on), and
        the weighted consumption of the LocalQueues of admission fair sharing."""
        shares: dict[str, int] = {}
        if self.enabled:
            shares = {
                name: self.weights.share(node).rounded()
                for name, node in tree.cluster_queues.items()
            }
        usage: dict[LocalQueueKey, float] = {}
        if ledger is not None:
            for lq, cq in self._lq_cq.items():
                if cq in self.usage_based:
                    usage[lq] = ledger.usage(lq, self.lq_weight(lq), now)
        return shares, usage

    def local_queue_status(
        self, ledger: Ledger | None, lq: LocalQueueKey, now: float
    ) -> dict[str, Any]:
        """``status.fairSharing.admissionFairSharingStatus`` of a LocalQueue whose
        ClusterQueue uses admission fair sharing: consumedResources and lastUpdate."""
        if ledger is None or self._lq_cq.get(lq) not in self.usage_based:
            return {}
        sample, taken = ledger.sampled(lq, now)
        consumed = {
            resource: fmt_quantity(resource, round(value * 1000))
            for resource, value in sample.items()
        }
        stamp = datetime.fromtimestamp(taken, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "fairSharing": {
                # Kueue writes the zero value (its CRD requires the field); it has no other.
                "weightedShare": 0,
                "admissionFairSharingStatus": {
                    "consumedResources": consumed,
                    "lastUpdate": stamp,
                },
            }
        }
