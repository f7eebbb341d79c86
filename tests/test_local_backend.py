"""The local backend's status records (its pure part; the e2e tests run the rest)."""

from __future__ import annotations

from services.watcher.local.statuses import StatusStore


def test_the_status_of_an_older_object_of_the_same_name_is_not_this_ones() -> None:
    """A workload deleted and submitted again under its name is a new object: what ran
    under the old uid (phase, generation) must not stop the new one from starting."""
    store = StatusStore({})
    store.statuses["ns/job"] = {"uid": "old", "phase": "Running", "generation": 3}
    assert store.of("ns/job", {"metadata": {"uid": "new"}}) == {}
    assert store.of("ns/job", {"metadata": {"uid": "old"}})["generation"] == 3
