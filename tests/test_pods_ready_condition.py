"""Kueue's PodsReady condition on the Workload objects admission shows
(services/admission/workload_objects.py): Started, WaitForRecovery, Recovered, WaitForStart."""

from __future__ import annotations

import msgspec
import pytest

from services.admission.workload_objects import WorkloadRecord
from shared.events import (
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPodsReady,
)
from tests.test_kube_status import ADMITTED, REF, SUBMITTED


def _fact(step: str) -> WorkloadAdmitted | WorkloadPodsReady | WorkloadEvicted:
    if step == "evicted":
        return WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x")
    if step == "admitted-again":
        return msgspec.structs.replace(ADMITTED, generation=2)
    generation = 0 if step == "late" else 1
    return WorkloadPodsReady(
        source="watcher", workload=REF, generation=generation, ready=step != "lost"
    )


CASES: list[tuple[list[str], tuple[str, str] | None, str]] = [
    ([], None, "no report yet: no condition (as before the watcher says anything)"),
    (["ready"], ("True", "Started"), "every pod ready: Started"),
    (["ready", "lost"], ("False", "WaitForRecovery"), "a pod lost: waiting for recovery"),
    (["ready", "lost", "ready"], ("True", "Recovered"), "ready again after a loss: Recovered"),
    (["late"], None, "a report about another admission changes nothing"),
    (["ready", "admitted-again"], ("False", "WaitForStart"), "a new admission starts over"),
    (["ready", "lost", "evicted"], ("False", "WaitForStart"), "evicted: not admitted, as Kueue"),
]


@pytest.mark.parametrize(("steps", "expected", "why"), CASES, ids=[c[2] for c in CASES])
def test_pods_ready_condition(steps: list[str], expected: tuple[str, str] | None, why: str) -> None:
    """The condition follows the watcher's readiness reports of the current admission."""
    record = WorkloadRecord.of(SUBMITTED)
    record.on_admitted(ADMITTED)
    for step in steps:
        fact = _fact(step)
        if isinstance(fact, WorkloadAdmitted):
            record.on_admitted(fact)
        elif isinstance(fact, WorkloadEvicted):
            record.on_evicted(fact)
        else:
            record.on_pods_ready(fact)
    condition = record.conditions.get("PodsReady")
    shown = None if condition is None else (condition.status, condition.reason)
    assert shown == expected, why
