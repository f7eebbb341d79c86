"""services/admission/pacing.py: when the deciding leader runs its next scheduling pass. The
rule (:func:`pass_spacing`) and the bookkeeping (:class:`PassPacing`) as tables, with the
reason per case."""

from __future__ import annotations

import pytest

from services.admission.pacing import (
    MAX_PASS_SPACING_S,
    PASS_SPACING_FACTOR,
    PassPacing,
    pass_spacing,
)

# (reason, the last pass's duration s, the spacing after it s)
SPACINGS: list[tuple[str, float, float]] = [
    ("a pass that took no time: the next may run at once", 0.0, 0.0),
    ("a cheap pass (a small cluster): a few ms of folding", 0.001, 0.001 * PASS_SPACING_FACTOR),
    ("a costly pass: the factor times its duration", 0.02, 0.02 * PASS_SPACING_FACTOR),
    ("a pass so costly the factor would pass the cap: the cap", 0.5, MAX_PASS_SPACING_S),
    ("a clock that stepped back (negative duration): no spacing, never negative", -0.3, 0.0),
]


@pytest.mark.parametrize(("reason", "last", "spacing"), SPACINGS, ids=[c[0] for c in SPACINGS])
def test_pass_spacing(reason: str, last: float, spacing: float) -> None:
    assert pass_spacing(last) == pytest.approx(spacing), reason


# (reason, steps, what take(now) says at the end, wait(now, idle=0.2) at the end). A step is
# ("arrived",), ("ran", ended, seconds) or ("take", now, expected); the end is at now = 10.0.
Step = tuple[object, ...]
STATES: list[tuple[str, list[Step], bool, float]] = [
    ("nothing arrived: no pass owed, the loop waits its idle time", [], False, 0.2),
    ("events arrived, no pass ran yet: due at once", [("arrived",)], True, 0.0),
    (
        "events arrived within a costly pass's spacing: owed, not yet due; waits the rest",
        [("ran", 9.99, 0.02), ("arrived",)],
        False,
        pytest.approx(0.05),
    ),
    (
        "events arrived after the spacing: due",
        [("ran", 9.9, 0.02), ("arrived",)],
        True,
        0.0,
    ),
    (
        "a pass taken owes nothing more until new events, even one that decided nothing",
        [("arrived",), ("take", 5.0, True)],
        False,
        0.2,
    ),
    (
        "a pass not yet due is not taken, and stays owed",
        [("ran", 9.95, 0.1), ("arrived",), ("take", 9.96, False)],
        False,
        pytest.approx(0.05),
    ),
    (
        "a costly pass's spacing is capped",
        [("ran", 10.0, 10.0), ("arrived",)],
        False,
        pytest.approx(MAX_PASS_SPACING_S),
    ),
    (
        "a pass started otherwise (a takeover, a backoff's end) owes nothing more",
        [("arrived",), ("ran", 1.0, 0.001)],
        False,
        0.2,
    ),
    (
        "a replica that stops deciding owes nothing: it waits its idle time, never spins",
        [("ran", 9.99, 0.02), ("arrived",), ("clear",)],
        False,
        0.2,
    ),
]


@pytest.mark.parametrize(("reason", "steps", "due", "wait"), STATES, ids=[c[0] for c in STATES])
def test_pass_pacing(reason: str, steps: list[Step], due: bool, wait: float) -> None:
    pacing = PassPacing()
    for step in steps:
        match step:
            case ("arrived",):
                pacing.arrived()
            case ("clear",):
                pacing.clear()
            case ("ran", float(ended), float(seconds)):
                pacing.ran(ended, seconds)
            case ("take", float(now), bool(expected)):
                assert pacing.take(now) is expected, reason
    now = 10.0
    assert pacing.wait(now, 0.2) == wait, reason
    assert pacing.take(now) is due, reason


def test_the_wait_is_never_longer_than_the_idle_time() -> None:
    """An owed pass due later than the loop's idle time: the loop looks again at its idle
    time (a lease to renew, a protection that ends), not only when the pass is due."""
    pacing = PassPacing()
    pacing.ran(10.0, 0.03)  # due at 10.09
    pacing.arrived()
    assert pacing.wait(10.0, 0.05) == 0.05
