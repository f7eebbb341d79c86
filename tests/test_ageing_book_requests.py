"""services/admission/bounds.py AgeingBook.request: a workload's whole request, read from the
service's records (which hold the pod sets already) or, for a book on its own, kept from the
submission; {} for a workload unknown or ended, either way."""

from __future__ import annotations

import msgspec
import pytest

from services.admission.bounds import AgeingBook
from services.admission.interning import Interner
from services.admission.workload_objects import WorkloadRecord
from shared.events import PodSet, WorkloadFinished, WorkloadRef, WorkloadSubmitted
from tests.test_ageing_book_waits import submitted

POD_SETS = [PodSet("main", 2, {"cpu": 1000}), PodSet("workers", 3, {"cpu": 500, "memory": 10})]


def event(uid: str, pod_sets: list[PodSet] = POD_SETS) -> WorkloadSubmitted:
    return msgspec.structs.replace(
        submitted(), workload=WorkloadRef("team-a", uid, uid), pod_sets=pod_sets
    )


def finished(uid: str) -> WorkloadFinished:
    return WorkloadFinished(
        source="watcher", workload=WorkloadRef("team-a", uid, uid), generation=0, succeeded=True
    )


# (reason, submitted uids, finished uids, asked uid, its request)
CASES: list[tuple[str, list[str], list[str], str, dict[str, int]]] = [
    ("submitted: every pod's requests summed", ["u1"], [], "u1", {"cpu": 3500, "memory": 30}),
    ("unknown: nothing", ["u1"], [], "u2", {}),
    ("finished: nothing", ["u1"], ["u1"], "u1", {}),
]


@pytest.mark.parametrize("from_records", [True, False], ids=["from records", "on its own"])
@pytest.mark.parametrize(
    ("reason", "submits", "finishes", "uid", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_request(
    from_records: bool,
    reason: str,
    submits: list[str],
    finishes: list[str],
    uid: str,
    expected: dict[str, int],
) -> None:
    records: dict[str, WorkloadRecord] = {}
    book = AgeingBook(records) if from_records else AgeingBook()
    interner = Interner()
    for one in submits:
        book.apply(event(one))
        records[one] = WorkloadRecord.of(interner.submitted(event(one)))
    for one in finishes:
        book.apply(finished(one))
        records[one].on_finished(finished(one))
    assert book.request(uid) == expected, reason


def test_records_alike_share_one_request_and_others_get_theirs() -> None:
    """The request is kept once per distinct pod sets: a workload with other pod sets never
    reads another's."""
    records: dict[str, WorkloadRecord] = {}
    book = AgeingBook(records)
    interner = Interner()
    other = [PodSet("main", 1, {"cpu": 1000})]
    for uid, pod_sets in (("u1", POD_SETS), ("u2", POD_SETS), ("u3", other)):
        records[uid] = WorkloadRecord.of(interner.submitted(event(uid, pod_sets)))
    assert book.request("u1") is book.request("u2")
    assert book.request("u3") == {"cpu": 1000}
