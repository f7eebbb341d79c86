"""A Berth line (shared/logging.py ``JsonLine`` and ``berth_bound_logger``) is byte for byte
the line structlog's own chain wrote before: its processors (context variables, level,
timestamp, traceback) then its JSON renderer with msgspec's encoder, through structlog's
filtering bound logger. Each scene logs through both configurations, with one stopped clock,
and the bytes are compared; a scene outside the shortcut (positional arguments, another
chain) must still come out as structlog writes it."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog
from structlog.testing import capture_logs

from shared.logging import JsonLine, LoopBatchedLines, UtcStamper, berth_bound_logger

NS = 1_767_323_045 * 10**9 + 123_456_000  # 2026-01-02T03:04:05.123456Z


def _stopped() -> int:
    return NS


def _structlogs_chain() -> list[Any]:
    """The chain a Berth service had before JsonLine (configure_logging, c0b4fba)."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        UtcStamper(clock=_stopped),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(
            serializer=lambda obj, **_: msgspec.json.encode(obj, enc_hook=str)
        ),
    ]


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """structlog's configuration and context variables as they were before the test."""
    before = structlog.get_config()
    context = structlog.contextvars.get_contextvars()
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service="svc")
    try:
        yield
    finally:
        structlog.configure(**before)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**context)


def _logger(file: io.BytesIO, *, berth: bool, level: int) -> Any:
    """A fresh logger of one configuration, writing to ``file`` (no running loop: each line
    is written at once)."""
    lines = LoopBatchedLines(file)
    structlog.configure(
        processors=[JsonLine(UtcStamper(clock=_stopped))] if berth else _structlogs_chain(),
        wrapper_class=(berth_bound_logger if berth else structlog.make_filtering_bound_logger)(
            level
        ),
        logger_factory=lambda *_: lines,
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger(component="admission")


def _written(scene: Callable[[Any], None], *, berth: bool, level: int) -> bytes:
    """What ``scene`` writes through a fresh logger of one configuration."""
    file = io.BytesIO()
    scene(_logger(file, berth=berth, level=level))
    return file.getvalue()


def _decision(log: Any) -> None:
    log.info("admitted", workload="ns/a", queue="cq", reason="fits", priority=0, waited_s=0.5)


def _interpolated(log: Any) -> None:
    log.info("lost %s of %d", "it", 3, workload="ns/a")


def _by_mapping(log: Any) -> None:
    log.info("%(what)s", {"what": "mapped"}, queue="q")


def _no_traceback(log: Any) -> None:
    log.info("fine", exc_info=False)


def _traceback(log: Any) -> None:
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.exception("failed", workload="ns/a")


def _warnings(log: Any) -> None:
    log.warning("fact_refused", workload="ns/a", queue="", reason="bad")
    log.warn("old_alias")
    log.msg("msg_alias")


def _bound(log: Any) -> None:
    bound = log.bind(cluster_queue="cq")
    bound.info("pending", workload="ns/a")
    bound.info("again", cluster_queue="overridden")


def _overrides(log: Any) -> None:
    log.info("mine", component="other", service="kw-beats-contextvar")


def _contextvar(log: Any) -> None:
    structlog.contextvars.bind_contextvars(request="r-1")
    log.info("with_request", workload="ns/a")


def _unbound(log: Any) -> None:
    structlog.contextvars.bind_contextvars(request="r-1")
    structlog.contextvars.unbind_contextvars("request")
    log.info("after_unbind", workload="ns/a")


def _not_json(log: Any) -> None:
    log.info("odd", path=Path("/a/b"), numbers=(1, 2), nested={"k": [1.5, None, True]})


def _debug(log: Any) -> None:
    log.debug("detail", workload="ns/a")
    log.info("then_info")


# (scene, the level configured, why)
SCENES: list[tuple[Callable[[Any], None], int, str]] = [
    (_decision, logging.INFO, "a decision's line: the shortcut's case"),
    (_interpolated, logging.INFO, "positional arguments: interpolated by structlog's path"),
    (_by_mapping, logging.INFO, "one mapping argument: interpolated by name"),
    (_no_traceback, logging.INFO, "exc_info=False: the key dropped, nothing rendered"),
    (_traceback, logging.INFO, "log.exception: level error and the traceback rendered"),
    (_warnings, logging.INFO, "warning, warn (level warning) and msg (info)"),
    (_bound, logging.INFO, "a bound value, then a keyword replacing it in its place"),
    (_overrides, logging.INFO, "keywords beat the logger's context; a contextvar never does"),
    (_contextvar, logging.INFO, "a context variable bound meanwhile is merged"),
    (_unbound, logging.INFO, "a context variable unbound (Ellipsis) is not merged"),
    (_not_json, logging.INFO, "what JSON lacks is its str(); tuples are lists"),
    (_decision, logging.WARNING, "info filtered out: nothing written"),
    (_warnings, logging.WARNING, "warnings still written when info is filtered"),
    (_debug, logging.DEBUG, "debug logs; info after it through the shortcut"),
]


@pytest.mark.parametrize(("scene", "level", "why"), SCENES, ids=[s[2] for s in SCENES])
def test_a_line_is_what_structlogs_chain_wrote(
    scene: Callable[[Any], None], level: int, why: str
) -> None:
    expected = _written(scene, berth=False, level=level)
    if (scene, level) != (_decision, logging.WARNING):  # the one scene that writes nothing
        assert expected, f"{why}: the scene must write something"
    assert _written(scene, berth=True, level=level) == expected, why


def test_captured_lines_take_structlogs_path() -> None:
    """A test's capture_logs replaces the chain: info must not render with JsonLine (nothing
    written), the event goes to the capture as structlog makes it."""
    file = io.BytesIO()
    log = _logger(file, berth=True, level=logging.INFO)
    with capture_logs() as captured:
        log.info("admitted", workload="ns/a")
    assert captured == [
        {"component": "admission", "workload": "ns/a", "event": "admitted", "log_level": "info"}
    ]
    assert file.getvalue() == b""
