"""The local backend's pure parts (status records, simulated run time); the e2e tests run
the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import cast

import pytest

from services.watcher.local_backend import LocalBackend, _remaining
from shared.events import WorkloadAdmitted, WorkloadRef
from shared.service import Runtime


def test_the_status_of_an_older_object_of_the_same_name_is_not_this_ones() -> None:
    """A workload deleted and submitted again under its name is a new object: what ran
    under the old uid (phase, generation) must not stop the new one from starting."""
    backend = LocalBackend(cast(Runtime, SimpleNamespace(bus=None, data_dir="/tmp")), stop_grace=1)
    backend.statuses["ns/job"] = {"uid": "old", "phase": "Running", "generation": 3}
    assert backend._status("ns/job", {"metadata": {"uid": "new"}}) == {}
    assert backend._status("ns/job", {"metadata": {"uid": "old"}})["generation"] == 3


def test_a_simulated_run_counts_its_time_from_its_admission() -> None:
    """A simulated workload runs from the admission, not from when the watcher heard of it:
    the watcher's lag is not quota held on top of the run. Never more than the run time (a
    clock ahead of ours), never less than nothing (an admission heard after its run ended)."""
    now = datetime.now(UTC)

    def admitted(ago: float) -> WorkloadAdmitted:
        return WorkloadAdmitted(
            source="admission",
            workload=WorkloadRef(namespace="ns", name="job", uid="u"),
            cluster_queue="cq",
            local_queue="lq",
            priority=0,
            assignments=[],
            generation=1,
            time=now - timedelta(seconds=ago),
        )

    assert _remaining(1.0, admitted(0.3)) == pytest.approx(0.7, abs=0.05)
    assert _remaining(1.0, admitted(5.0)) == 0.0
    assert _remaining(1.0, admitted(-5.0)) == 1.0
