"""The garbage collector's setting (shared/gc_tuning.py): applied unless turned off, a bad value
refused, and a real service process reads it before it touches the bus."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth_cli.nats_cluster import free_port
from shared.gc_tuning import (
    GC_VARIABLE,
    MIDDLE_THRESHOLD,
    OLD_THRESHOLD,
    YOUNG_THRESHOLD,
    tune_gc,
)
from shared.service import DEFAULT_PORTS
from tests.conftest import REPO

PYTHON_DEFAULT = (700, 10, 10)


@pytest.fixture(autouse=True)
def _restore_threshold() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*PYTHON_DEFAULT)
    yield
    gc.set_threshold(*before)


TUNED = (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)

# (environment, applied, threshold after, why)
SETTINGS = [
    ({}, True, TUNED, "unset: tuned"),
    ({GC_VARIABLE: "1"}, True, TUNED, "1: tuned"),
    ({GC_VARIABLE: "0"}, False, PYTHON_DEFAULT, "0: a deployment keeps Python's defaults"),
]


@pytest.mark.parametrize(
    ("env", "applied", "threshold", "reason"), SETTINGS, ids=[s[3] for s in SETTINGS]
)
def test_the_young_threshold_is_raised_unless_turned_off(
    env: dict[str, str], applied: bool, threshold: tuple[int, int, int], reason: str
) -> None:
    assert tune_gc(env) is applied, reason
    assert gc.get_threshold() == threshold, reason


# (survivors allocated, why): every object is kept, as a service keeps its state.
KEPT = [
    (4 * YOUNG_THRESHOLD, "a few young collections: the first middle one"),
    (14 * YOUNG_THRESHOLD, "more than Python's ten young collections between middle ones"),
]


@pytest.mark.parametrize(("count", "reason"), KEPT, ids=[k[1] for k in KEPT])
def test_no_collection_short_of_a_full_one_scans_more_than_three_young_thresholds(
    count: int, reason: str
) -> None:
    """A middle collection comes after every second young one, so its pause (it scans the
    young and middle generations) never covers more than three young collections' worth of
    survivors; with Python's middle threshold of 10 it covered up to twelve."""
    tune_gc({})
    scanned: list[int] = []

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] < 2:
            scanned.append(sum(len(gc.get_objects(g)) for g in range(info["generation"] + 1)))

    gc.collect()  # from an empty young and middle generation
    gc.callbacks.append(on_collection)
    try:
        kept: list[list[int]] = [[] for _ in range(count)]
    finally:
        gc.callbacks.remove(on_collection)
    assert len(kept) == count
    assert scanned, reason
    assert max(scanned) <= 3 * YOUNG_THRESHOLD + 1_000, (reason, max(scanned))


def generations_until_full(threshold: tuple[int, int, int]) -> list[int]:
    """The generation of each collection, from empty young and middle generations, while
    every object allocated is kept (as a service keeps its state), up to the first full one."""
    gc.collect()
    gc.set_threshold(*threshold)
    collected: list[int] = []

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    kept: list[list[int]] = []
    gc.callbacks.append(on_collection)
    try:
        while 2 not in collected and len(collected) < 1_000:
            kept.append([])
    finally:
        gc.callbacks.remove(on_collection)
        gc.set_threshold(*PYTHON_DEFAULT)
    kept.clear()
    gc.collect()
    return collected


# A young threshold small enough for a test: the cadence in collections is the middle and old
# thresholds' (counted against the young one, whatever it is).
TEST_YOUNG = 2_000


def _in_a_fresh_process(threshold: tuple[int, int, int]) -> list[int]:
    """generations_until_full in an interpreter of its own: whether a full collection runs
    also depends on the objects already kept (Python's 25% rule), which in a long test run
    are many more than in a service starting."""
    code = (
        "import json; from tests.test_gc_tuning import generations_until_full;"
        f" print(json.dumps(generations_until_full({threshold!r})))"
    )
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    return list(json.loads(result.stdout))


def test_a_middle_collection_is_every_third_and_full_ones_keep_pythons_cadence() -> None:
    """The cadence tune_gc's docstring states: young, young, middle, ...; the first full
    collection at the same collection as with Python's middle and old thresholds (10, 10).
    Fails with an old threshold of 50: the first full one came 21 collections later."""
    tuned = _in_a_fresh_process((TEST_YOUNG, MIDDLE_THRESHOLD, OLD_THRESHOLD))
    python = _in_a_fresh_process((TEST_YOUNG, 10, 10))
    assert tuned[:-1] == [0, 0, 1] * (len(tuned) // 3), "a middle one after two young ones"
    assert python[:12] == [0] * 11 + [1], "Python's: a middle one after eleven young ones"
    assert tuned[-1] == 2 and python[-1] == 2, (tuned[-3:], python[-3:])
    assert len(tuned) == len(python), (len(tuned), len(python))


@pytest.mark.parametrize("value", ["", "yes", "true", "2"])
def test_a_value_other_than_0_or_1_is_refused_and_nothing_changes(value: str) -> None:
    with pytest.raises(ValueError, match=f"{GC_VARIABLE} must be 0 or 1"):
        tune_gc({GC_VARIABLE: value})
    assert gc.get_threshold() == PYTHON_DEFAULT


@pytest.mark.parametrize("service", sorted(DEFAULT_PORTS))
def test_a_service_process_reads_the_setting_at_start(service: str, tmp_path: Path) -> None:
    """Every service goes through run_service: a bad value stops it with one line naming the
    variable, before it connects anywhere (no bus is running here)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "BERTH_DATA_DIR": str(tmp_path / "berth"),
        "BERTH_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "BERTH_HTTP_PORT": str(free_port()),
        GC_VARIABLE: "yes",
    }
    result = subprocess.run(
        [sys.executable, "-m", f"services.{service}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, (result.returncode, output)
    assert "invalid_setting" in output and f"{GC_VARIABLE} must be 0 or 1" in output, output
    assert "Traceback" not in output, "one line, not a crash"
