"""The local backend's status records (its pure part; the e2e tests run the rest)."""

from __future__ import annotations

import pytest

from services.watcher.local.finishes import unreported_finish
from services.watcher.local.statuses import StatusStore


def test_the_status_of_an_older_object_of_the_same_name_is_not_this_ones() -> None:
    """A workload deleted and submitted again under its name is a new object: what ran
    under the old uid (phase, generation) must not stop the new one from starting."""
    store = StatusStore({})
    store.statuses["ns/job"] = {"uid": "old", "phase": "Running", "generation": 3}
    assert store.of("ns/job", {"metadata": {"uid": "new"}}) == {}
    assert store.of("ns/job", {"metadata": {"uid": "old"}})["generation"] == 3


UNREPORTED: list[tuple[dict[str, object], bool, str]] = [
    ({"phase": "Succeeded", "generation": 1}, True, "the gap: terminal, no mark (issue 15)"),
    ({"phase": "Failed", "generation": 2, "exitCode": 3}, True, "a failure frees quota too"),
    ({"phase": "Succeeded", "reported": True}, False, "stored after its report was"),
    ({"phase": "Failed", "reported": True}, False, "stored after its report was"),
    ({"phase": "Succeeded", "reported": "yes"}, True, "only the watcher's true counts: again"),
    ({"phase": "Running", "generation": 1}, False, "not finished: the restart evicts it"),
    ({"phase": "Evicted", "generation": 1}, False, "an eviction's report precedes its status"),
    ({}, False, "no status: never started"),
]


@pytest.mark.parametrize(("status", "unreported", "reason"), UNREPORTED)
def test_which_finishes_a_starting_watcher_reports_again(
    status: dict[str, object], unreported: bool, reason: str
) -> None:
    assert unreported_finish(status) is unreported, reason
