"""services/admission/queues.py shape_of: a pod sets list's shape is encoded once per list
object and handed back for that very object only (each case against the encoding itself)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.admission import queues
from services.admission.flavors import pod_sets_shape
from shared.events import PodSet


def _pod_sets(cpu: int) -> list[PodSet]:
    return [PodSet("main", 2, {"cpu": cpu})]


SHARED = _pod_sets(1000)


def _nothing(pod_sets: list[PodSet]) -> None:
    pass


def _stale_entry(pod_sets: list[PodSet]) -> None:
    """The table holds the list's id for another list (as if the id were reused)."""
    queues._SHAPE_OF[id(pod_sets)] = (_pod_sets(9000), pod_sets_shape(_pod_sets(9000)))


# (why, the list seen first, what happens then, the list asked, whether it is encoded anew)
CASES: list[tuple[str, list[PodSet], Callable[[list[PodSet]], None], list[PodSet], bool]] = [
    ("the same list again: its shape known, not encoded", SHARED, _nothing, SHARED, False),
    ("an equal list, another object: encoded anew", SHARED, _nothing, _pod_sets(1000), True),
    ("another shape: encoded anew", SHARED, _nothing, _pod_sets(2000), True),
    (
        "an entry for its id holds another list: not that one's shape",
        SHARED,
        _stale_entry,
        SHARED,
        True,
    ),
]


@pytest.mark.parametrize(
    ("why", "first", "then", "asked", "encoded"), CASES, ids=[c[0] for c in CASES]
)
def test_a_shape_is_known_for_the_very_list_only(
    monkeypatch: pytest.MonkeyPatch,
    why: str,
    first: list[PodSet],
    then: Callable[[list[PodSet]], None],
    asked: list[PodSet],
    encoded: bool,
) -> None:
    calls: list[list[PodSet]] = []

    def counted(pod_sets: list[PodSet]) -> bytes:
        calls.append(pod_sets)
        return pod_sets_shape(pod_sets)

    monkeypatch.setattr(queues, "pod_sets_shape", counted)
    monkeypatch.setattr(queues, "_SHAPE_OF", {})
    queues.shape_of(first)
    then(asked)
    calls.clear()
    shape = queues.shape_of(asked)
    assert shape == pod_sets_shape(asked), why
    assert (calls == [asked]) is encoded, why
    assert queues.shape_of(asked) is shape, why  # kept once: the same object again
