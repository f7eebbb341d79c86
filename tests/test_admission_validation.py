"""Admission trusts no fact blindly (services/admission/validation.py): the rule, table-driven;
the fold refuses with one log line and a count; and a property: no sequence of facts, however
malformed, drives usage below 0 or above quota."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from services.admission import interning, validation
from services.admission.scheduler import Admission
from services.admission.service import AdmissionService
from services.admission.validation import refusal
from shared.config import parse_object
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.service import Runtime
from tests.conftest import captured_logs
from tests.test_scheduler import cq, flavor, group, lq

GOOD_REF = WorkloadRef("default", "job", "uid-1")


def submitted(
    pod_sets: list[PodSet] | None = None, ref: WorkloadRef = GOOD_REF, queue: str = "lq0"
) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        source="watcher",
        workload=ref,
        kind="Job",
        queue_name=queue,
        pod_sets=[PodSet("main", 1, {"cpu": 1000})] if pod_sets is None else pod_sets,
        created=now(),
    )


def admitted(
    usage: dict[str, int], ref: WorkloadRef = GOOD_REF, cq: str = "cq0"
) -> WorkloadAdmitted:
    assignment = FlavorAssignment("main", 1, {r: "f" for r in usage}, usage)
    return WorkloadAdmitted(
        source="admission",
        workload=ref,
        cluster_queue=cq,
        local_queue="lq0",
        priority=0,
        assignments=[assignment],
        generation=1,
    )


CASES: list[tuple[AnyEvent, str | None, str]] = [
    (submitted(), None, "a well-formed fact"),
    (
        submitted(queue="not-there-yet"),
        None,
        "an unknown LocalQueue is pending (Kueue), not refused",
    ),
    (submitted(queue=""), None, "no queue: the namespace's default LocalQueue"),
    (submitted([PodSet("main", 0, {"cpu": 1000})]), "invalid_count", "a pod set of zero pods"),
    (
        submitted([PodSet("main", -3, {"cpu": 1000})]),
        "invalid_count",
        "a negative count would free quota on admission",
    ),
    (submitted([PodSet("main", 2, {"cpu": -1000})]), "negative_quantity", "a negative request"),
    (
        submitted([PodSet("main", 1, {"cpu": 2**63})]),
        "quantity_too_large",
        "beyond Kubernetes' int64",
    ),
    (
        submitted([PodSet("main", 1, {"bad name": 1})]),
        "invalid_resource",
        "a resource that is no resource name",
    ),
    (
        submitted([PodSet("main", 2, {"cpu": 1}, min_count=3)]),
        "invalid_count",
        "min_count above count",
    ),
    (
        submitted([PodSet("main", 2, {"cpu": 1}, min_count=-1)]),
        "invalid_count",
        "a negative min_count",
    ),
    (
        submitted([PodSet("a", 1, {}), PodSet("a", 1, {})]),
        "invalid_pod_set",
        "duplicate pod set names",
    ),
    (submitted([]), "no_pod_sets", "nothing to admit"),
    (submitted(ref=WorkloadRef("default", "/tmp/x", "u")), "invalid_name", "a path as a name"),
    (submitted(ref=WorkloadRef("Team A", "job", "u")), "invalid_name", "an invalid namespace"),
    (submitted(ref=WorkloadRef("default", "job", "")), "invalid_name", "no uid"),
    (submitted(queue="Bad Queue"), "invalid_queue", "a queue name no LocalQueue can have"),
    (admitted({"cpu": 1000}), None, "an admission that holds 1 cpu"),
    (admitted({"cpu": -1000}), "negative_quantity", "an admission with negative usage"),
    (admitted({"cpu": 1000}, cq="../cq"), "invalid_queue", "an admission to a path"),
    (
        WorkloadFinished(source="w", workload=GOOD_REF, generation=-5, succeeded=True),
        None,
        "matched by uid, no quantity",
    ),
]


@pytest.mark.parametrize(("event", "code", "why"), CASES)
def test_the_rule(event: AnyEvent, code: str | None, why: str) -> None:
    found = refusal(event)
    assert (found.code if found else None) == code, why


# (fact, whether its workload's names are shown valid at once (_valid_ref), whether its
# first pod set's requests are (_valid_quantities), why): after one fact of namespace
# "default" with cpu and memory, these are remembered valid; either shortcut may only pass
# what the full judgement passes, and the verdict is the same with both turned off.
SHORTCUT_CASES: list[tuple[WorkloadSubmitted, bool, bool, str]] = [
    (submitted([PodSet("main", 2, {"cpu": 1, "memory": 0})]), True, True, "all remembered"),
    (
        submitted(ref=WorkloadRef("ns-never-seen", "job", "u")),
        False,
        True,
        "a namespace not remembered yet: judged (valid)",
    ),
    (submitted(ref=WorkloadRef("Team A", "job", "u")), False, True, "an invalid namespace"),
    (submitted(ref=WorkloadRef("default", "/tmp/x", "u")), False, True, "an invalid name"),
    (submitted(ref=WorkloadRef("default", "job", "")), False, True, "no uid"),
    (submitted([PodSet("main", 1, {})]), True, True, "no requests: nothing to judge"),
    (submitted([PodSet("main", 1, {"cpu": -1})]), True, False, "a negative request"),
    (submitted([PodSet("main", 1, {"cpu": 2**63})]), True, False, "too large a request"),
    (submitted([PodSet("main", 1, {"bad name": 1})]), True, False, "an invalid resource"),
    (
        submitted([PodSet("main", 1, {"example.org/new": 1})]),
        True,
        False,
        "a resource not remembered yet: judged (valid)",
    ),
]


@pytest.mark.parametrize(
    ("event", "ref_at_once", "quantities_at_once", "why"),
    SHORTCUT_CASES,
    ids=[c[3] for c in SHORTCUT_CASES],
)
def test_the_shortcuts_give_the_full_verdict(
    monkeypatch: pytest.MonkeyPatch,
    event: WorkloadSubmitted,
    ref_at_once: bool,
    quantities_at_once: bool,
    why: str,
) -> None:
    assert refusal(submitted([PodSet("main", 1, {"cpu": 1, "memory": 1})])) is None
    assert validation._valid_ref(event.workload) is ref_at_once, why
    assert validation._valid_quantities(event.pod_sets[0].requests) is quantities_at_once, why
    found = refusal(event)
    monkeypatch.setattr(validation, "_valid_ref", lambda ref: False)
    monkeypatch.setattr(validation, "_valid_quantities", lambda quantities: False)
    judged = refusal(event)
    assert found == judged, why


# (fact, the known identity passed, the refusal code expected, why): a fact whose workload
# equals the known (already checked) identity has its names not judged again; anything else is.
KNOWN_CASES: list[tuple[AnyEvent, WorkloadRef | None, str | None, str]] = [
    (admitted({"cpu": 1000}), GOOD_REF, None, "the known identity, a good admission"),
    (
        admitted({"cpu": 1000}, ref=WorkloadRef("Team A", "job", "u")),
        WorkloadRef("Team A", "job", "u"),
        None,
        "equal to the known identity: its names are not judged again (shortcut applies)",
    ),
    (
        admitted({"cpu": 1000}, ref=WorkloadRef("Team A", "job", "u")),
        None,
        "invalid_name",
        "no known identity: the names are judged",
    ),
    (
        admitted({"cpu": 1000}, ref=WorkloadRef("Team A", "job", "uid-1")),
        GOOD_REF,
        "invalid_name",
        "same uid, another namespace: not the known identity, judged",
    ),
    (
        admitted({"cpu": 1000}, ref=WorkloadRef("default", "/tmp/x", "uid-1")),
        GOOD_REF,
        "invalid_name",
        "same uid, another name: judged",
    ),
    (admitted({"cpu": -1000}), GOOD_REF, "negative_quantity", "known: quantities still judged"),
    (admitted({"cpu": 1000}, cq="../cq"), GOOD_REF, "invalid_queue", "known: queue still judged"),
    (submitted(queue="Bad Queue"), GOOD_REF, "invalid_queue", "a resubmission: queue judged"),
]


@pytest.mark.parametrize(("event", "known", "code", "why"), KNOWN_CASES)
def test_a_known_identity(
    event: AnyEvent, known: WorkloadRef | None, code: str | None, why: str
) -> None:
    found = refusal(event, known)
    assert (found.code if found else None) == code, why


# (the (value, rule, remember) judged in turn, each one's problem expected (None: valid),
# what is remembered afterwards per rule, why): valid names that repeat are judged once
REMEMBERED_CASES: list[tuple[list[tuple[str, str, bool]], list[bool], dict[str, set[str]], str]] = [
    (
        [("cq-1", "name", True), ("cq-1", "name", True)],
        [False, False],
        {"name": {"cq-1"}},
        "a valid queue name: judged once, remembered",
    ),
    (
        [("Bad Queue", "name", True), ("Bad Queue", "name", True)],
        [True, True],
        {},
        "a name with a problem: never remembered, judged (and refused) every time",
    ),
    (
        [("example.com/gpu", "label-key", True), ("example.com/gpu", "name", True)],
        [False, True],
        {"label-key": {"example.com/gpu"}},
        "valid as a resource name, not as a queue name: one rule's memory is not another's",
    ),
    (
        [("job-7", "name", False), ("uid-7", "uid", True)],
        [False, False],
        {},
        "a workload's own name (remember=False) and uid (no memory kept): never remembered",
    ),
    (
        [("a", "name", True), ("b", "name", True), ("c", "name", True), ("a", "name", True)],
        [False, False, False, False],
        {"name": {"c", "a"}},
        "past the limit (2 here) the memory starts over",
    ),
]


@pytest.mark.parametrize(
    ("calls", "problems", "remembered", "why"),
    REMEMBERED_CASES,
    ids=[c[3] for c in REMEMBERED_CASES],
)
def test_valid_names_remembered(
    monkeypatch: pytest.MonkeyPatch,
    calls: list[tuple[str, str, bool]],
    problems: list[bool],
    remembered: dict[str, set[str]],
    why: str,
) -> None:
    fresh: dict[str, dict[str, bool]] = {"namespace": {}, "name": {}, "label-key": {}}
    monkeypatch.setattr(validation, "_VALID", fresh)
    monkeypatch.setattr(interning, "TABLE_LIMIT", 2)
    found = [
        validation._problem(value, rule, remember=remember) is not None
        for value, rule, remember in calls
    ]
    assert found == problems, why
    assert {rule: set(names) for rule, names in fresh.items() if names} == remembered, why


def _assigned(assignment: FlavorAssignment) -> WorkloadAdmitted:
    return msgspec.structs.replace(admitted({"cpu": 1}), assignments=[assignment])


# (fact, the refusal's message word for word, why): where the message names the pod set
MESSAGE_CASES: list[tuple[AnyEvent, str, str]] = [
    (
        submitted([PodSet("main", 0, {"cpu": 1})]),
        'pod set "main": count 0 is not positive',
        "a pod set's own field",
    ),
    (
        submitted([PodSet("a", 1, {}), PodSet("b", 1, {"cpu": -1})]),
        'pod set "b" requests: cpu -1m is negative',
        "a request of the second pod set: that pod set named",
    ),
    (
        _assigned(FlavorAssignment("main", -1, {"cpu": "f"}, {"cpu": 1})),
        'assignment of pod set "main": count -1 is negative',
        "an assignment's count",
    ),
    (
        _assigned(FlavorAssignment("w", 1, {}, {"cpu": 2**64})),
        'assignment of pod set "w" usage: cpu 18446744073709551616m is too large',
        "an assignment's usage",
    ),
    (
        _assigned(FlavorAssignment("main", 1, {"cpu": "Bad F"}, {"gpu": 2, "cpu": 1, "mem": 0})),
        "assignment of pod set \"main\": no valid flavor for ['cpu', 'gpu']",
        "every used resource without a valid flavor, sorted; an unused one is no problem",
    ),
]


@pytest.mark.parametrize(("event", "message", "why"), MESSAGE_CASES)
def test_the_message(event: AnyEvent, message: str, why: str) -> None:
    found = refusal(event)
    assert found is not None and found.message == message, why


# (flavor of the used resource "example.com/gpu", the refusal code, why): the names a fact
# repeats are found among those remembered valid without being judged again; a name
# remembered under another rule, or never, is still judged.
REMEMBERED_FLAVOR_CASES: list[tuple[str | None, str | None, str]] = [
    ("gpu-a", None, "a valid flavor name: remembered, found again, no refusal"),
    (
        "example.com/gpu",
        "invalid_flavor",
        "remembered valid as the resource (a label key), not as a flavor name: judged, refused",
    ),
    (None, "invalid_flavor", "no flavor for a used resource"),
    ("Bad F", "invalid_flavor", "an invalid flavor name, never remembered: refused each time"),
]


@pytest.mark.parametrize(
    ("flavor", "code", "why"),
    REMEMBERED_FLAVOR_CASES,
    ids=[c[2] for c in REMEMBERED_FLAVOR_CASES],
)
def test_remembered_names_in_an_assignment(flavor: str | None, code: str | None, why: str) -> None:
    flavors = {} if flavor is None else {"example.com/gpu": flavor}
    event = _assigned(FlavorAssignment("main", 1, flavors, {"example.com/gpu": 1}))
    for _ in range(2):  # the second time with the names remembered
        found = validation.refusal(event)
        assert (None if found is None else found.code) == code, why
    assert "example.com/gpu" in validation._VALID["label-key"], why


GOOD = FlavorAssignment("main", 1, {"cpu": "f"}, {"cpu": 1000})
# (the first assignment judged, the second, the second's refusal code, why): a valid
# assignment is remembered by identity; only that very object skips its checks.
SAME_ASSIGNMENT_CASES: list[tuple[FlavorAssignment, FlavorAssignment, str | None, str]] = [
    (GOOD, GOOD, None, "the same object, judged valid: found, not judged again"),
    (
        GOOD,
        msgspec.structs.replace(GOOD, count=-1),
        "invalid_count",
        "another object (a decoded or changed one): judged, refused",
    ),
    (
        FlavorAssignment("main", 1, {}, {"cpu": 1000}),
        FlavorAssignment("main", 1, {}, {"cpu": 1000}),
        "invalid_flavor",
        "a refused one is never remembered: an equal one is refused again",
    ),
]


@pytest.mark.parametrize(
    ("first", "second", "code", "why"),
    SAME_ASSIGNMENT_CASES,
    ids=[c[3] for c in SAME_ASSIGNMENT_CASES],
)
def test_a_valid_assignment_is_judged_once(
    first: FlavorAssignment, second: FlavorAssignment, code: str | None, why: str
) -> None:
    validation.refusal(_assigned(first))
    remembered = validation._VALID_ASSIGNMENTS.get(id(second)) is second
    assert remembered == (second is first and code is None), why
    found = validation.refusal(_assigned(second))
    assert (None if found is None else found.code) == code, why


def _service() -> AdmissionService:
    service = AdmissionService(cast(Runtime, SimpleNamespace(bus=None)))
    documents = [
        flavor("f"),
        cq("cq0", group(["cpu"], ("f", {"cpu": (4, 2, None)})), cohort="c"),
        cq("cq1", group(["cpu"], ("f", {"cpu": 2})), cohort="c"),
        lq("lq0", "cq0"),
        lq("lq1", "cq1"),
    ]
    service.scheduler.set_config([parse_object(d) for d in documents])
    return service


def _refused_count(reason: str) -> float:
    value = REGISTRY.get_sample_value("berth_admission_refused_facts_total", {"reason": reason})
    return value or 0.0


def test_a_refused_fact_is_logged_once_counted_and_never_folded() -> None:
    service = _service()
    before = _refused_count("negative_quantity")
    bad = submitted([PodSet("main", 2, {"cpu": -1000})])
    with captured_logs(validation) as logs:
        service._apply([bad])
    assert [log for log in logs if log["event"] == "fact_refused"] == [
        {
            "component": "admission.validation",
            "event": "fact_refused",
            "log_level": "warning",
            "workload": "default/job",
            "queue": "lq0",
            "reason": 'pod set "main" requests: cpu -1000m is negative',
            "fact": "WorkloadSubmitted",
            "event_id": bad.id,
        }
    ]
    assert _refused_count("negative_quantity") == before + 1
    assert service.scheduler.workload_views() == []  # never reached the scheduler
    assert "uid-1" not in service.records
    # The next good workload is admitted as usual.
    service._apply([submitted(ref=WorkloadRef("default", "good", "uid-2"))])
    assert [d.ref.name for d in service.scheduler.schedule() if isinstance(d, Admission)] == [
        "good"
    ]


# (the admission's workload, refused, why): the fold passes a folded submission's identity
FOLD_KNOWN_CASES = [
    (GOOD_REF, False, "the submitted workload's own identity: folded"),
    (WorkloadRef("Team A", "job", "uid-1"), True, "its uid under a bad namespace: refused"),
    (WorkloadRef("default", "Bad Name", "uid-1"), True, "its uid under a bad name: refused"),
]


@pytest.mark.parametrize(("ref", "refused", "why"), FOLD_KNOWN_CASES)
def test_the_fold_checks_a_known_uid_under_another_identity(
    ref: WorkloadRef, refused: bool, why: str
) -> None:
    service = _service()
    service._apply([submitted()])
    before = _refused_count("invalid_name")
    service._apply([admitted({"cpu": 1000}, ref=ref)])
    assert _refused_count("invalid_name") == before + refused, why
    assert (service.records["uid-1"].admission is None) == refused, why


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
    service = _service()
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
