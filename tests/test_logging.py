"""The log line's timestamp (shared/logging.py ``UtcStamper``): exactly what structlog's ISO
UTC stamper wrote, though the part up to the second is formatted once per second; and a real
service line, as users and tools read it; the lines of one loop turn written together
(``LoopBatchedLines``)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import structlog
from structlog.testing import capture_logs

from shared.logging import HELD_LIMIT, LoopBatchedLines, UtcStamper, get_logger

REPO = Path(__file__).resolve().parent.parent
SECOND = 1_767_323_045  # 2026-01-02T03:04:05Z

# (the clock in ns, the stamp, why)
STAMP_CASES = [
    (SECOND * 10**9 + 123_456_000, "2026-01-02T03:04:05.123456Z", "microseconds, six digits"),
    (SECOND * 10**9, "2026-01-02T03:04:05Z", "a whole second has no fraction (isoformat)"),
    (SECOND * 10**9 + 999, "2026-01-02T03:04:05Z", "below a µs is floored away, as datetime.now"),
    (SECOND * 10**9 + 1_000, "2026-01-02T03:04:05.000001Z", "leading zeros kept"),
    (SECOND * 10**9 + 999_999_999, "2026-01-02T03:04:05.999999Z", "the second's last µs"),
    (
        (SECOND + 1) * 10**9 + 5_000,
        "2026-01-02T03:04:06.000005Z",
        "the next second: the second formatted before must not be reused",
    ),
    (1_767_225_599 * 10**9 + 1_000, "2025-12-31T23:59:59.000001Z", "a year's last second"),
    (1_767_225_600 * 10**9, "2026-01-01T00:00:00Z", "and the next year's first"),
]


def test_stamps_as_structlog_did_in_any_order() -> None:
    """One stamper through every case, forwards and backwards (each case follows another
    second than its own at least once)."""
    stamper = UtcStamper()
    for ns, stamp, why in [*STAMP_CASES, *reversed(STAMP_CASES)]:
        assert stamper.stamp(ns) == stamp, why
        second, micro = divmod(ns // 1000, 1_000_000)
        structlogs = datetime.fromtimestamp(second, UTC).replace(microsecond=micro)
        assert stamp == structlogs.isoformat().replace("+00:00", "Z"), why


@pytest.mark.parametrize(("ns", "stamp", "why"), STAMP_CASES, ids=[c[2] for c in STAMP_CASES])
def test_a_line_takes_its_stamp_from_the_clock(ns: int, stamp: str, why: str) -> None:
    stamper = UtcStamper(clock=lambda: ns)
    assert stamper(None, "info", {"event": "x"}) == {"event": "x", "timestamp": stamp}, why


def test_a_service_line_is_one_json_object_in_its_order() -> None:
    """A Berth line and a third-party library's, as a service writes them to stderr."""
    script = (
        "import logging\n"
        "from shared.logging import configure_logging, get_logger\n"
        "configure_logging(service='svc')\n"
        "get_logger('admission').info('admitted', workload='ns/a', queue='q', reason='fits')\n"
        "logging.getLogger('nats').warning('lost %s', 'it')\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    get_logger('admission').exception('failed', workload='ns/a')\n"
        "    logging.getLogger('nats').exception('library failed')\n"
        "get_logger('admission').info('fine', exc_info=False)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    ours, theirs, failed, library, fine = [json.loads(line) for line in done.stderr.splitlines()]
    assert list(ours) == [
        "component",
        "workload",
        "queue",
        "reason",
        "event",
        "service",
        "level",
        "timestamp",
    ]
    assert (ours["event"], ours["service"], ours["level"]) == ("admitted", "svc", "info")
    assert list(theirs) == ["event", "service", "level", "timestamp", "logger"]
    for line in (failed, library):  # a traceback is rendered, whoever logged it
        assert "exc_info" not in line and "ZeroDivisionError" in line["exception"], line
    order = ["component", "workload", "event", "service", "level", "timestamp", "exception"]
    assert list(failed) == order
    assert list(fine) == ["component", "event", "service", "level", "timestamp"]
    for line in (ours, theirs):
        parsed = datetime.fromisoformat(line["timestamp"])
        assert parsed.tzinfo == UTC and line["timestamp"].endswith("Z")


class _Writes(io.BytesIO):
    """A file that remembers each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return super().write(data)


def _in_a_loop(lines: LoopBatchedLines, body: Callable[[], Awaitable[None]]) -> list[bytes]:
    """``body`` run in a loop; what was written when it ended (the loop then turns once)."""

    async def main() -> list[bytes]:
        await body()
        during = list(cast(_Writes, lines.file).writes)
        await asyncio.sleep(0)
        return during

    return asyncio.run(main())


def _in_one_turn(lines: LoopBatchedLines) -> list[bytes]:
    """Three lines logged by one callback; what was written while it ran."""

    async def body() -> None:
        for word in (b"a", b"b", b"c"):
            lines.msg(word)

    return _in_a_loop(lines, body)


def _outside_a_loop(lines: LoopBatchedLines) -> list[bytes]:
    lines.msg(b"a")
    lines.msg(b"b")
    return []


def _left_by_a_closed_loop(lines: LoopBatchedLines) -> list[bytes]:
    """Line "a" logged in a loop that stops and closes before its turn to write; the
    writes made so far."""
    loop = asyncio.new_event_loop()

    def log_then_stop() -> None:
        lines.msg(b"a")
        loop.stop()

    loop.call_soon(log_then_stop)
    loop.run_forever()
    loop.close()
    return list(cast(_Writes, lines.file).writes)


def _a_closed_loop_leaves_them(lines: LoopBatchedLines) -> list[bytes]:
    """The next loop writes the lines a closed one left, first."""
    during = _left_by_a_closed_loop(lines)

    async def second() -> None:
        lines.msg(b"b")
        await asyncio.sleep(0)

    asyncio.run(second())
    return during


def _closed_loop_then_no_loop(lines: LoopBatchedLines) -> list[bytes]:
    """A line outside any loop (the CLI after a run) after a closed loop's: the held line
    goes out first."""
    during = _left_by_a_closed_loop(lines)
    lines.msg(b"b")
    return during


def _past_the_limit(lines: LoopBatchedLines) -> list[bytes]:
    """One turn logs more than HELD_LIMIT lines: the first HELD_LIMIT go out at once."""

    async def body() -> None:
        for _ in range(HELD_LIMIT + 1):
            lines.msg(b"x")

    return _in_a_loop(lines, body)


def _two_turns(lines: LoopBatchedLines) -> list[bytes]:
    """A line in each of two turns of one loop: the first turn's write done, the second
    turn's line must ask for a write of its own (none is due any more)."""

    async def body() -> None:
        lines.msg(b"a")
        await asyncio.sleep(0)
        lines.msg(b"b")

    return _in_a_loop(lines, body)


def _another_thread_meanwhile(lines: LoopBatchedLines) -> list[bytes]:
    """While a loop is due to write its turn's lines, a thread with no loop logs one: a
    write is due, but not on that thread's loop (it has none), so it writes at once, the
    held line first."""

    async def body() -> None:
        lines.msg(b"a")
        other = threading.Thread(target=lines.msg, args=(b"b",))
        other.start()
        other.join()

    return _in_a_loop(lines, body)


Scene = Callable[[LoopBatchedLines], list[bytes]]
# (what happens, the writes expected after it, the writes while it happened, why)
BATCHED_LINES: list[tuple[Scene, list[bytes], list[bytes], str]] = [
    (_in_one_turn, [b"a\nb\nc\n"], [], "one turn's lines go out in one write, after the turn"),
    (_outside_a_loop, [b"a\n", b"b\n"], [], "no loop (the CLI): each line written at once"),
    (_a_closed_loop_leaves_them, [b"a\nb\n"], [], "a closed loop's lines are not lost"),
    (_closed_loop_then_no_loop, [b"a\nb\n"], [], "a line outside a loop never overtakes one held"),
    (_two_turns, [b"a\n", b"b\n"], [b"a\n"], "each turn of a loop writes its own lines"),
    (
        _another_thread_meanwhile,
        [b"a\nb\n"],
        [b"a\nb\n"],
        "a loop due to write elsewhere does not hold a thread's line",
    ),
    (
        _past_the_limit,
        [b"x\n" * HELD_LIMIT, b"x\n"],
        [b"x\n" * HELD_LIMIT],
        "a turn of many lines holds at most HELD_LIMIT",
    ),
]


@pytest.mark.parametrize(("scene", "writes", "during", "why"), BATCHED_LINES)
def test_lines_of_one_turn_are_one_write(
    scene: Scene,
    writes: list[bytes],
    during: list[bytes],
    why: str,
) -> None:
    lines = LoopBatchedLines(_Writes())
    assert scene(lines) == during, why
    assert cast(_Writes, lines.file).writes == writes, why


@pytest.mark.parametrize("exit_call", ["raise SystemExit(0)", "flush_logs(); os._exit(3)"])
def test_held_lines_are_written_when_the_process_exits(exit_call: str) -> None:
    """A line logged just before the process ends (a normal exit: the exit hook; os._exit:
    the lease-lost path calls flush_logs first) reaches stderr."""
    code = (
        "import asyncio, os\n"
        "from shared.logging import configure_logging, flush_logs, get_logger\n"
        "configure_logging(service='t')\n"
        "async def main():\n"
        "    get_logger('t').info('last_words')\n"
        f"    {exit_call}\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=REPO)
    assert b'"event":"last_words"' in done.stderr, done.stderr


def test_a_library_line_keeps_its_place_among_berth_lines() -> None:
    """A standard-library record (nats, aiohttp) logged between two Berth lines of one turn
    comes out between them."""
    code = (
        "import asyncio, logging\n"
        "from shared.logging import configure_logging, get_logger\n"
        "configure_logging(service='t')\n"
        "async def main():\n"
        "    get_logger('t').info('first')\n"
        "    logging.getLogger('nats').error('library')\n"
        "    get_logger('t').info('last')\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=REPO)
    events = [json.loads(line)["event"] for line in done.stderr.splitlines()]
    assert events == ["first", "library", "last"], done.stderr


# (structlog keeps a logger on first use, a line logged after a reconfiguration is
#  captured, why)
KEPT_LOGGER_CASES = [
    (True, False, "kept: get_logger's logger keeps the level method structlog's proxy keeps"),
    (False, True, "not kept (a test's configuration): each line asks the proxy, as configured"),
]


@pytest.mark.parametrize(
    ("cache", "captured_after", "why"), KEPT_LOGGER_CASES, ids=[c[2] for c in KEPT_LOGGER_CASES]
)
def test_a_logger_keeps_its_method_only_when_structlog_keeps_its_logger(
    cache: bool, captured_after: bool, why: str
) -> None:
    before = structlog.get_config()
    # Every level passes, whatever an in-process CLI run configured before (it keeps errors).
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=cache,
    )
    try:
        log = get_logger("kept")
        with capture_logs() as first:
            log.info("one", workload="ns/a")
        assert first == [
            {"component": "kept", "workload": "ns/a", "event": "one", "log_level": "info"}
        ], why
        assert ("info" in vars(log)) is cache, why
        # A configuration made after the first line: a kept logger does not see it, as
        # structlog's own cached proxy does not; an unkept one does.
        structlog.configure(processors=[structlog.testing.LogCapture()])
        with capture_logs() as second:
            log.info("two")
        assert bool(second) is captured_after, why
    finally:
        structlog.configure(
            processors=before["processors"],
            wrapper_class=before["wrapper_class"],
            cache_logger_on_first_use=before["cache_logger_on_first_use"],
        )
