"""The local watcher's remembered simulated runtimes (objects.simulated_seconds): a text read
before gives what parse_duration gave it; a different text or a refused one is parsed again."""

from __future__ import annotations

import pytest

from services.watcher.local import objects
from services.watcher.local.objects import SECONDS_MEMO_SIZE, simulated_seconds
from shared.durations import parse_duration

# (texts read in order, the seconds of the last, why)
SECONDS_CASES = [
    (["1000ms"], 1.0, "first read: parsed"),
    (["1000ms", "1000ms"], 1.0, "read again: the remembered value, the same"),
    (["1000ms", "2m"], 120.0, "another text: parsed, not the first one's value"),
    (["2m", "2 m"], 120.0, "a text spelled differently: parsed on its own"),
    (["1.5s", "1.5"], 1.5, "no unit: seconds, parsed on its own"),
    (["500ms", "1h", "500ms"], 0.5, "the first text still remembered after another"),
]


@pytest.fixture(autouse=True)
def _empty_memo() -> None:
    objects._seconds.clear()


@pytest.mark.parametrize(("texts", "seconds", "why"), SECONDS_CASES)
def test_a_runtime_read_again_gives_what_parsing_it_gave(
    texts: list[str], seconds: float, why: str
) -> None:
    for text in texts:
        assert simulated_seconds(text) == parse_duration(text), why
    assert simulated_seconds(texts[-1]) == seconds, why
    assert objects._seconds == {text: parse_duration(text) for text in texts}, why


# (a text that is no duration, why)
REFUSED = [
    ("soon", "a word"),
    ("-1s", "negative"),
    ("", "empty"),
]


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_a_refused_runtime_raises_each_time_and_is_never_remembered(text: str, why: str) -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="invalid duration"):
            simulated_seconds(text)
    assert text not in objects._seconds, why


def test_the_memo_forgets_everything_past_its_size() -> None:
    for index in range(SECONDS_MEMO_SIZE):
        simulated_seconds(f"{index}ms")
    assert len(objects._seconds) == SECONDS_MEMO_SIZE
    assert simulated_seconds("7s") == 7.0  # one past the bound: the rest forgotten
    assert objects._seconds == {"7s": 7.0}
