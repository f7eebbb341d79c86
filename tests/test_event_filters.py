"""Admission's folds skip an event by its exact type before their cases (a set lookup;
an isinstance miss against a msgspec class costs ~150 ns, several per event), and tell their
cases apart by exact type too (``type(event) is X``). Each set must name every class a case
is for, or that case would never run."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast, get_args

import msgspec
import pytest

from services.admission import activation, admission_checks, bounds, gates, pods_ready, service
from shared import events
from shared.service import Runtime


def _case_classes(function: Callable[..., Any]) -> set[type]:
    """The event classes of every case in the function: each ``type(event) is X`` (and any
    class pattern of a match statement)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    names = {
        node.cls.id
        for node in ast.walk(tree)
        if isinstance(node, ast.MatchClass) and isinstance(node.cls, ast.Name)
    }
    names |= {
        node.comparators[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Call)
        and isinstance(node.left.func, ast.Name)
        and node.left.func.id == "type"
        and isinstance(node.ops[0], ast.Is)
        and isinstance(node.comparators[0], ast.Name)
        and hasattr(events, node.comparators[0].id)
    }
    assert names, f"{function.__qualname__} tells no event class apart"
    return {getattr(events, name) for name in names}


# (the fold, the set it skips by, why)
FILTER_CASES: list[tuple[Callable[..., Any], frozenset[type], str]] = [
    (
        service.AdmissionService._apply,
        service._MATCHED | {events.WorkloadPodsReady},  # its condition: set before the filter
        "the service's fold",
    ),
    (bounds.AgeingBook.apply, bounds._FOLDED, "the starvation bounds"),
    (pods_ready.PodsReadyClock.apply, pods_ready._FOLDED, "the pods-ready clock"),
    (admission_checks.CheckGate.apply, admission_checks._FOLDED, "the admission checks"),
    (gates.Gates.apply, gates._FOLDED, "the gates' own cases"),
    (activation.Activity.echoed, activation._ECHOED, "the echoes of inactive workloads"),
]


@pytest.mark.parametrize(("fold", "kept", "why"), FILTER_CASES, ids=[c[2] for c in FILTER_CASES])
def test_every_case_passes_the_filter(
    fold: Callable[..., Any], kept: frozenset[type], why: str
) -> None:
    assert _case_classes(fold) <= kept, why


def test_the_gates_pass_what_their_gates_fold() -> None:
    """Gates.apply skips before calling the clock and the checks: it keeps all they fold."""
    assert pods_ready._FOLDED | admission_checks._FOLDED <= gates._FOLDED


def test_events_are_never_subclassed() -> None:
    """The filters compare exact types: no event class derives from another one."""
    classes = [c for c in vars(events).values() if isinstance(c, type)]
    for cls in classes:
        if issubclass(cls, events.Event) and cls is not events.Event:
            assert cls.__bases__ == (events.Event,), cls


# Every value a required field of an event needs, by name: one event of each kind.
_FIELDS: dict[str, object] = {
    "source": "test",
    "workload": {"namespace": "ns", "name": "a", "uid": "a"},
    "kind": "Job",
    "queue_name": "lq",
    "pod_sets": [{"name": "main", "count": 1, "requests": {"cpu": 1}}],
    "created": "2026-01-01T00:00:00Z",
    "cluster_queue": "cq",
    "reason": "Pending",
    "message": "m",
    "local_queue": "lq",
    "priority": 0,
    "assignments": [],
    "generation": 1,
    "check": "c",
    "state": "Ready",
    "succeeded": True,
    "object": {},
    "active": False,
    "boost": 1,
    "job_id": 1,
    "status": "RUNNING",
    "recoveries": 0,
    "role": "admission",
    "holder": "a",
}


def _one_of(kind: type) -> events.AnyEvent:
    fields = msgspec.structs.fields(kind)
    value: object = msgspec.convert({f.name: _FIELDS[f.name] for f in fields if f.required}, kind)
    return cast(events.AnyEvent, value)


# (the part's method the service's fold calls, the methods whose cases are what it reads, why)
HOISTED_CASES: list[tuple[tuple[type, str], list[Callable[..., Any]], str]] = [
    ((bounds.AgeingBook, "apply"), [bounds.AgeingBook.apply], "the starvation bounds"),
    (
        (gates.Gates, "apply"),
        [gates.Gates.apply, pods_ready.PodsReadyClock.apply, admission_checks.CheckGate.apply],
        "the gates (their own cases, the pods-ready clock's and the admission checks')",
    ),
    ((activation.Activity, "echoed"), [activation.Activity.echoed], "the echoes"),
]


@pytest.mark.parametrize(
    ("part", "reading", "why"), HOISTED_CASES, ids=[c[2] for c in HOISTED_CASES]
)
def test_the_fold_calls_a_part_for_every_kind_it_reads(
    part: tuple[type, str],
    reading: list[Callable[..., Any]],
    why: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AdmissionService._apply skips a part's call for a kind the part would pass by (a
    filter hoisted out of the part): fed one event of every kind it folds, it calls the part
    for exactly the kinds the part's cases read (none skipped, no call to pass one by)."""
    called: list[type] = []
    monkeypatch.setattr(part[0], part[1], lambda self, event: called.append(type(event)))
    kinds = list(get_args(events.AnyEvent))
    for kind in kinds:  # each to a service of its own: an unknown workload every time
        fold = service.AdmissionService(cast(Runtime, SimpleNamespace(bus=None)))
        fold._apply([_one_of(kind)])
    read = set().union(*(_case_classes(method) for method in reading))
    assert called == [k for k in kinds if k in read], why
