"""What admission's validation (services/admission/validation.py) remembers so as not to judge
again: the names and quantities shown valid at once, the valid names per rule, and a valid
assignment by identity; each shortcut passes only what the full judgement passes."""

from __future__ import annotations

import msgspec
import pytest

from services.admission import interning, validation
from services.admission.validation import refusal
from shared.events import FlavorAssignment, PodSet, WorkloadRef, WorkloadSubmitted
from tests.validation_facts import assigned, submitted

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
    event = assigned(FlavorAssignment("main", 1, flavors, {"example.com/gpu": 1}))
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
    validation.refusal(assigned(first))
    remembered = validation._VALID_ASSIGNMENTS.get(id(second)) is second
    assert remembered == (second is first and code is None), why
    found = validation.refusal(assigned(second))
    assert (None if found is None else found.code) == code, why
