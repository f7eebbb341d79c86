"""Admission trusts no fact blindly (services/admission/validation.py): the rule, table-driven;
the refusal's code for each malformed fact, with and without a known identity, and its message
word for word."""

from __future__ import annotations

import pytest

from services.admission.validation import refusal
from shared.events import AnyEvent, FlavorAssignment, PodSet, WorkloadFinished, WorkloadRef
from tests.validation_facts import GOOD_REF, admitted, assigned, submitted

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
        assigned(FlavorAssignment("main", -1, {"cpu": "f"}, {"cpu": 1})),
        'assignment of pod set "main": count -1 is negative',
        "an assignment's count",
    ),
    (
        assigned(FlavorAssignment("w", 1, {}, {"cpu": 2**64})),
        'assignment of pod set "w" usage: cpu 18446744073709551616m is too large',
        "an assignment's usage",
    ),
    (
        assigned(FlavorAssignment("main", 1, {"cpu": "Bad F"}, {"gpu": 2, "cpu": 1, "mem": 0})),
        "assignment of pod set \"main\": no valid flavor for ['cpu', 'gpu']",
        "every used resource without a valid flavor, sorted; an unused one is no problem",
    ),
]


@pytest.mark.parametrize(("event", "message", "why"), MESSAGE_CASES)
def test_the_message(event: AnyEvent, message: str, why: str) -> None:
    found = refusal(event)
    assert found is not None and found.message == message, why
