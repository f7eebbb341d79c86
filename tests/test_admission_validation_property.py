"""A property of admission's validation (services/admission/validation.py): no sequence of
facts, however malformed, drives usage below 0 or above quota."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.admission.scheduler import Admission
from shared.events import (
    AnyEvent,
    PodSet,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from tests.validation_facts import admission_service, admitted, submitted

# --- the property ------------------------------------------------------------------------------

_NAMES = st.sampled_from(["w", "/tmp/x", "", "A", "a" * 300, "..", "ok.name"])
_QUEUES = st.sampled_from(["lq0", "lq1", "", "missing", "Bad Queue"])
_AMOUNTS = st.one_of(st.integers(-3000, 3000), st.sampled_from([0, 2**63, -(2**63), 10**30]))
_POD_SET = st.builds(
    PodSet,
    name=st.sampled_from(["main", "w", ""]),
    count=st.integers(-3, 4),
    requests=st.dictionaries(st.sampled_from(["cpu", "memory", "bad name"]), _AMOUNTS, max_size=2),
    min_count=st.one_of(st.none(), st.integers(-2, 5)),
)
_UIDS = st.integers(0, 12).map(lambda i: f"u{i}")


@st.composite
def _submitted(draw: st.DrawFn) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="watcher",
        workload=WorkloadRef(
            draw(st.sampled_from(["default", "default", "Bad NS"])), draw(_NAMES), draw(_UIDS)
        ),
        kind="Job",
        queue_name=draw(_QUEUES),
        pod_sets=draw(st.lists(_POD_SET, max_size=3)),
        created=now(),
        priority=draw(st.integers(-5, 5)),
    )


@st.composite
def _forged_admission(draw: st.DrawFn) -> WorkloadAdmitted:
    """An admission nobody decided, malformed: negative or absurd usage."""
    usage = {"cpu": draw(st.sampled_from([-1000, -(2**63), 2**64]))}
    return admitted(
        usage,
        ref=WorkloadRef("default", "w", draw(_UIDS)),
        cq=draw(st.sampled_from(["cq0", "cq1"])),
    )


def _ref(uid: str) -> WorkloadRef:
    return WorkloadRef("default", "w", uid)


_GOOD = st.builds(
    lambda uid, queue, count, cpu: submitted(
        [PodSet("main", count, {"cpu": cpu})], _ref(uid), queue
    ),
    _UIDS,
    st.sampled_from(["lq0", "lq1"]),
    st.integers(1, 3),
    st.integers(0, 3000),
)
_FACT = st.one_of(
    _GOOD,
    _GOOD,
    _submitted(),
    _submitted(),
    _forged_admission(),
    st.builds(
        lambda uid, gen, ok: WorkloadFinished(
            source="w", workload=_ref(uid), generation=gen, succeeded=ok
        ),
        _UIDS,
        st.integers(-1, 3),
        st.booleans(),
    ),
    st.builds(
        lambda uid, gen: WorkloadEvicted(
            source="w", workload=_ref(uid), generation=gen, reason="Preempted"
        ),
        _UIDS,
        st.integers(-1, 3),
    ),
    st.builds(lambda uid: WorkloadDeleted(source="w", workload=_ref(uid)), _UIDS),
    st.just("schedule"),
    st.just("schedule"),
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(_FACT, min_size=5, max_size=40))
def test_no_sequence_of_facts_breaks_the_books(steps: list[Any]) -> None:
    """Folded through the service (as the stream would deliver them, decisions echoed back),
    no sequence of facts drives usage below 0 or above any limit, and only well-formed
    pod sets are ever admitted."""
    service = admission_service()
    scheduler = service.scheduler
    for step in steps:
        if step == "schedule":
            echoes: list[AnyEvent] = []
            for decision in scheduler.schedule():
                if isinstance(decision, Admission):
                    echoes.append(
                        WorkloadAdmitted(
                            source="admission",
                            workload=decision.ref,
                            cluster_queue=decision.cluster_queue,
                            local_queue=decision.local_queue,
                            priority=decision.priority,
                            assignments=decision.assignments,
                            generation=scheduler.generation(decision.ref),
                        )
                    )
            service._apply(echoes)
        else:
            service._apply([step])
        assert scheduler.quota.violations() == []
        for view in scheduler.workload_views():
            for assignment in view.assignments:
                assert assignment.count > 0
                assert all(0 <= amount <= 2**63 - 1 for amount in assignment.usage.values())
