"""The admission service's gates (services/admission/gates.py): a reservation becomes a
reserved-only event when checks apply, and a replay of the same events (a restart, a
standby) holds the same workloads until the same time."""

from __future__ import annotations

from datetime import UTC, datetime

from services.admission.gates import Gates
from shared.config import ConfigObject, parse_object
from shared.events import (
    AdmissionCheckUpdated,
    AnyEvent,
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadRef,
)

REF = WorkloadRef("default", "job", "uid-1")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _config() -> list[ConfigObject]:
    return [
        parse_object(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {
                    "admissionChecksStrategy": {
                        "admissionChecks": [{"name": "gpu", "onFlavors": ["a100"]}]
                    }
                },
            }
        )
    ]


def _admission(flavor: str) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id="admitted-uid-1-1",
        source="admission",
        workload=REF,
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[
            FlavorAssignment(pod_set="main", count=1, flavors={"gpu": flavor}, usage={"gpu": 1000})
        ],
        generation=1,
        time=T0,
    )


def test_reserve_only_when_a_check_applies() -> None:
    """onFlavors: an a100 admission waits for the gpu check; a t4 one is admitted at once."""
    gates = Gates()
    gates.set_config(_config())
    waiting = gates.reserve(_admission("a100"))
    assert waiting.reserved_only and waiting.admission_checks == ["gpu"]
    assert waiting.id == "reserved-uid-1-1"
    plain = _admission("t4")
    assert gates.reserve(plain) is plain


def test_a_replay_holds_the_same_workload_until_the_same_time() -> None:
    """The leader decides a Retry; a fresh Gates folding the same events agrees on the hold."""
    leader = Gates()
    leader.set_config(_config())
    history: list[AnyEvent] = [
        leader.reserve(_admission("a100")),
        AdmissionCheckUpdated(
            source="cli", workload=REF, check="gpu", state="Retry", requeue_after_seconds=30
        ),
    ]
    for event in history:
        leader.apply(event)
    [eviction] = leader.due(1000.0)
    assert isinstance(eviction, EvictionRequested) and eviction.reason == "AdmissionCheck"
    history += [eviction, WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x")]
    for event in history[2:]:
        leader.apply(event)
    assert leader.after_eviction(REF, 1) == "hold"

    replica = Gates()
    replica.set_config(_config())
    for event in history:
        replica.apply(event)
    assert replica.after_eviction(REF, 1) == "hold"
    assert replica.held == leader.held == {REF.uid: (REF, 1030.0, 1)}
    assert replica.due(1000.0) == [], "decided once, by the event in the stream"
    assert replica.released(1029.0) == [] and replica.released(1030.0) == [
        (REF, "AdmissionCheck", 1)
    ]
