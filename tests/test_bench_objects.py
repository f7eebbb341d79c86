"""The benchmarks' lean generators (bench/objects.py, bench/kueue_drive.py): a Job spliced
from its encoded shape is byte for byte the one :func:`simulated_job` builds and msgspec
encodes, the uids are uuid4's, and the creates' records built after a run are those the
generator used to build per create; while it drives, the generator's collector is set as the
services' are."""

from __future__ import annotations

import gc
import uuid
from datetime import datetime, timedelta
from typing import Any

import msgspec
import pytest

from bench.kueue_config import BASELINE, LARGE_SCALE
from bench.kueue_drive import CLASS_LABEL, RUNTIME_LABEL, Created, created_records
from bench.kueue_measure import services_collector
from bench.objects import SimulatedJobs, creation_timestamp, simulated_job, uuid4_strings
from shared.gc_tuning import GC_VARIABLE, MIDDLE_THRESHOLD, OLD_THRESHOLD, YOUNG_THRESHOLD

UID = "0389205b-c4e1-4f4b-862e-f917c98d13ae"

# (why, namespace, runtime_ms, the shape's keywords, name)
SHAPES: list[tuple[str, str, int, dict[str, Any], str]] = [
    ("the throughput bench's: defaults only", "tp-7", 1000, {}, "tp-12345"),
    (
        "the Kueue bench's: cpu, a pod priority and the class labels",
        "cq-0-3-cohort-1",
        200,
        {"cpu": "5", "priority": 50, "labels": {CLASS_LABEL: "large", RUNTIME_LABEL: "200"}},
        "large-2-3-0",
    ),
    ("a priority of 0 is still written", "ns", 1, {"priority": 0}, "j"),
    ("a priority class label", "ns", 60_000, {"priority_class": "high"}, "a.b-c"),
    (
        "labels that need escaping stay the encoder's",
        "ns",
        5,
        {"labels": {"note": 'a "quoted"\nline \\ %s %%'}},
        "job",
    ),
]


@pytest.mark.parametrize(
    ("reason", "namespace", "runtime_ms", "shape", "name"), SHAPES, ids=[s[0] for s in SHAPES]
)
def test_a_spliced_job_is_the_encoded_simulated_job(
    reason: str, namespace: str, runtime_ms: int, shape: dict[str, Any], name: str
) -> None:
    stamp = creation_timestamp()
    built = simulated_job(name, namespace, runtime_ms, uid=UID, **shape)
    built["metadata"]["creationTimestamp"] = stamp
    spliced = SimulatedJobs(namespace, runtime_ms, **shape).encode(name, UID, stamp)
    assert spliced == msgspec.json.encode(built), reason
    assert msgspec.json.decode(spliced) == built, reason


def test_a_creation_timestamp_is_simulated_jobs() -> None:
    before = datetime.now().astimezone()
    stamp = creation_timestamp()
    built = simulated_job("j", "ns", 1)["metadata"]["creationTimestamp"]
    for text in (stamp, built):
        parsed = datetime.fromisoformat(text)
        assert parsed.utcoffset() == timedelta(0)
        assert parsed >= before
    assert len(stamp) == len(built), "the same form: microseconds and the offset"


@pytest.mark.parametrize(
    ("count", "reason"),
    [(0, "none asked"), (1, "one"), (35, "a small stream's"), (5_000, "many: all distinct")],
)
def test_uuid4_strings_are_uuid4s_as_str_writes_them(count: int, reason: str) -> None:
    uids = uuid4_strings(count)
    assert len(uids) == len(set(uids)) == count, reason
    for text in uids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122, reason
        assert str(parsed) == text, reason


# (why, config, what a create kept: ClusterQueue, class index, name, uid, creationTimestamp)
MADE = [
    (
        "a baseline small",
        BASELINE,
        (
            BASELINE.cluster_queues()[0][0],
            0,
            "small-0-0-0",
            UID,
            "2026-01-02T03:04:05.678901+00:00",
        ),
    ),
    (
        "a large-scale large in the last cohort",
        LARGE_SCALE,
        (LARGE_SCALE.cluster_queues()[-1][0], 2, "large-2-3-0", UID, "2026-01-02T03:04:05+00:00"),
    ),
]


@pytest.mark.parametrize(("reason", "config", "made"), MADE, ids=[m[0] for m in MADE])
def test_a_creates_record_is_built_after_the_run_as_it_was_per_create(
    reason: str, config: Any, made: tuple[str, int, str, str, str]
) -> None:
    cq, set_index, name, uid, stamp = made
    klass = config.classes[set_index]
    expected = Created(  # what the generator built per create before
        uid=uid,
        name=name,
        cluster_queue=cq,
        cohort=dict(config.cluster_queues())[cq],
        klass=klass.name,
        cpu=klass.request_cpu,
        runtime_ms=klass.runtime_ms,
        created=datetime.fromisoformat(stamp).timestamp(),
    )
    assert created_records(config, [made, made]) == [expected, expected], reason


# (BERTH_GC_TUNING, whether the drive raises, thresholds inside, why)
COLLECTORS = [
    ("1", False, (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD), "the services' setting"),
    ("0", False, None, "the services keep Python's: so does the generator"),
    ("1", True, (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD), "a drive that fails"),
]


@pytest.mark.parametrize(
    ("variable", "fails", "inside", "reason"), COLLECTORS, ids=[c[3] for c in COLLECTORS]
)
def test_the_generator_collects_as_the_services_while_it_drives(
    variable: str,
    fails: bool,
    inside: tuple[int, int, int] | None,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(GC_VARIABLE, variable)
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    try:
        with services_collector():
            seen.append(gc.get_threshold())
            if fails:
                raise RuntimeError("the drive failed")
    except RuntimeError:
        assert fails, reason
    assert seen == [inside or before], reason
    assert gc.get_threshold() == before, f"{reason}: Python's setting again after"
