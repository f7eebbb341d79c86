"""Admission's folds skip an event by its exact type before their cases (a set lookup;
an isinstance miss against a msgspec class costs ~150 ns, several per event), and tell their
cases apart by exact type too (``type(event) is X``). Each set must name every class a case
is for, or that case would never run."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from services.admission import activation, admission_checks, bounds, gates, pods_ready, service
from shared import events


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


# (the set the service's fold filters a part's calls by, that part's own filter, why)
HOISTED_CASES: list[tuple[frozenset[type], frozenset[type], str]] = [
    (bounds.AgeingBook.FOLDED, bounds._FOLDED, "the starvation bounds"),
    (gates.Gates.FOLDED, gates._FOLDED, "the gates"),
    (activation.Activity.ECHOED, activation._ECHOED, "the echoes of inactive workloads"),
]


@pytest.mark.parametrize(
    ("hoisted", "own", "why"), HOISTED_CASES, ids=[c[2] for c in HOISTED_CASES]
)
def test_the_fold_calls_a_part_for_every_kind_it_reads(
    hoisted: frozenset[type], own: frozenset[type], why: str
) -> None:
    """AdmissionService._apply skips a part's call for a kind the part would pass by: by the
    part's own filter, the same set, so no kind it reads is ever skipped."""
    assert hoisted is own, why
