"""The local backend's status records and object reading (their pure parts; the e2e tests run
the rest)."""

from __future__ import annotations

import msgspec
import pytest

from services.watcher.local.finishes import unreported_finish
from services.watcher.local.objects import read_workload
from services.watcher.local.statuses import StatusStore
from shared.workloads import SIMULATED_RUNTIME_ANNOTATION


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


def _simulated_job(runtime: str | None) -> bytes:
    annotations = {} if runtime is None else {SIMULATED_RUNTIME_ANNOTATION: runtime}
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    return msgspec.json.encode(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }
    )


# (berth.dev/simulated-runtime, what the refusal says or None if the object is read, why)
SIMULATED_RUNTIMES: list[tuple[str | None, str | None, str]] = [
    (None, None, "no annotation: a workload that runs its command"),
    ("200ms", None, "milliseconds"),
    ("1.5s", None, "seconds, with a fraction"),
    ("30", None, "seconds without a unit"),
    ("soon", "invalid duration 'soon'", "no duration: refused when read, not when admitted"),
    ("-1s", "invalid duration '-1s'", "a negative runtime"),
    ("", "invalid duration ''", "empty"),
]


@pytest.mark.parametrize(("runtime", "refusal", "why"), SIMULATED_RUNTIMES)
def test_a_simulated_runtime_that_is_no_duration_is_refused_when_read(
    runtime: str | None, refusal: str | None, why: str
) -> None:
    """Read only once admitted, a bad runtime failed every batch of admissions it was in,
    and its own admission was then dropped with its quota held."""
    read = read_workload("ns.j", _simulated_job(runtime))
    if refusal is None:
        assert not isinstance(read, str), f"{why}: {read}"
        return
    assert isinstance(read, str), why
    assert read.startswith(f"`metadata.annotations.{SIMULATED_RUNTIME_ANNOTATION}`"), why
    assert refusal in read, why
