"""The log line's timestamp (shared/logging.py ``UtcStamper``): exactly what structlog's ISO
UTC stamper wrote, though the part up to the second is formatted once per second; and a real
service line, as users and tools read it."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.logging import UtcStamper

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
