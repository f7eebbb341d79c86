"""Which due managed jobs hold their reservation: ``ageing.reservation_granted`` applied to the
jobs recovery keeps, with each job's request read once from its template."""

from __future__ import annotations

from collections.abc import Iterable

from services.recovery.ageing import reservation_granted
from shared.config import AgeingPolicy, ClusterQueue
from shared.jobs import ManagedJob
from shared.starvation import queue_facts, request_of
from shared.workloads import WorkloadError, workload_spec

__all__ = ["Reservations"]


class Reservations:
    def __init__(self) -> None:
        self._requests: dict[int, dict[str, int]] = {}  # job id -> milli-units per resource

    def request(self, job: ManagedJob) -> dict[str, int]:
        cached = self._requests.get(job.id)
        if cached is None:
            try:
                pod_sets = workload_spec(dict(job.template)).pod_sets
            except WorkloadError:
                pod_sets = []  # launched jobs were checked; an odd old record asks nothing
            cached = self._requests[job.id] = request_of(pod_sets)
        return cached

    def granted(
        self,
        job: ManagedJob,
        *,
        policy: AgeingPolicy,
        cluster_queue: ClusterQueue | None,
        jobs: Iterable[ManagedJob],
    ) -> bool:
        """Whether the due ``job`` holds its reservation now (the share rule)."""
        if cluster_queue is None or job.first_preempted_at is None:
            return False
        # Ties (jobs preempted in one batch share a clock) go by workload uid, as
        # admission and preemption order reservations.
        clock = (job.first_preempted_at, _uid(job))
        earlier = [
            self.request(other)
            for other in jobs
            if other.cluster_queue == job.cluster_queue
            and not other.done
            and other.first_preempted_at is not None
            and (other.first_preempted_at, _uid(other)) < clock
        ]
        return reservation_granted(
            policy,
            request=self.request(job),
            nominal=queue_facts(cluster_queue).nominal,
            earlier=earlier,
        )


def _uid(job: ManagedJob) -> str:
    attempt = job.current
    return "" if attempt is None else attempt.uid
