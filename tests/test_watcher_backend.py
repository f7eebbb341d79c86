"""The watcher's backend contract: both backends satisfy it, one rule routes every command."""

from __future__ import annotations

from typing import Any

import pytest

from services.watcher.backend import carry_out
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.local.backend import LocalBackend
from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    EvictionRequested,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadRef,
)

REF = WorkloadRef(namespace="ns", name="w", uid="u")


class Recorder:
    """A backend that records which verb was called."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create(self, command: Any) -> None:
        self.calls.append("create")

    async def delete(self, command: Any) -> None:
        self.calls.append("delete")

    async def admit(self, decision: Any) -> None:
        self.calls.append("admit")

    async def evict(self, decision: Any) -> None:
        self.calls.append("evict")

    async def observe(self) -> None:
        self.calls.append("observe")


ROUTES: list[tuple[AnyEvent, str | None, str]] = [
    (
        WorkloadAdmitted(
            source="admission",
            workload=REF,
            cluster_queue="cq",
            local_queue="lq",
            priority=0,
            assignments=[],
            generation=1,
        ),
        "admit",
        "admission's decision starts the workload",
    ),
    (
        EvictionRequested(
            source="preemption", workload=REF, cluster_queue="cq", generation=1, reason="Preempted"
        ),
        "evict",
        "preemption's order stops it",
    ),
    (CreateWorkload(source="recovery", workload=REF, object={}), "create", "a managed attempt"),
    (SubmitWorkload(source="cli", workload=REF, object={}), "create", "`berth submit`"),
    (DeleteWorkload(source="recovery", workload=REF), "delete", "a cancelled managed job"),
    (RemoveWorkload(source="cli", workload=REF), "delete", "`berth delete workload`"),
    (
        WorkloadFinished(source="watcher", workload=REF, generation=1, succeeded=True),
        None,
        "a fact is not the watcher's to carry out",
    ),
]


@pytest.mark.parametrize(("event", "verb", "reason"), ROUTES, ids=[r[2] for r in ROUTES])
async def test_carry_out_routes_each_event_to_one_verb(
    event: AnyEvent, verb: str | None, reason: str
) -> None:
    """Each decision or command reaches exactly one verb; anything else none."""
    backend = Recorder()  # passed where a Backend is expected: mypy checks the protocol
    handled = await carry_out(backend, event)
    assert backend.calls == ([verb] if verb else []), reason
    assert handled is (verb is not None)


@pytest.mark.parametrize("backend", [LocalBackend, KubernetesBackend, Recorder])
def test_every_backend_satisfies_the_protocol(backend: type) -> None:
    """Both real backends (and the test double) have every verb of the contract (mypy checks
    their signatures where each is used as a ``Backend``: services/watcher/__main__.py and
    ``run_kubernetes``)."""
    for verb in ("create", "delete", "admit", "evict", "observe"):
        assert callable(getattr(backend, verb)), verb
