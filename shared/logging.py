"""structlog, configured once per process: one JSON object per line on stderr.

Berth's own loggers render bytes natively and write a loop turn's lines at once
(:class:`LoopBatchedLines`); third-party libraries that log through the standard library
(nats, aiohttp, kubernetes_asyncio) are routed through the same JSON renderer. Exceptions
are rendered without frame locals, so no secret in a local variable reaches the log.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any, BinaryIO

import msgspec

from shared.deferred import hidden

with hidden("rich"):  # structlog's console renderer only (shared/deferred.py)
    import structlog
    from structlog.typing import EventDict

__all__ = [
    "JsonLine",
    "LoopBatchedLines",
    "UtcStamper",
    "berth_bound_logger",
    "configure_logging",
    "flush_logs",
    "get_logger",
]

_configured = False
HELD_LIMIT = 512  # lines held at most before they are written


def _processors(stamper: UtcStamper | None = None) -> list[Any]:
    """Berth's chain before rendering (its lines' and the stdlib records')."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        stamper or UtcStamper(),
        _exception_rendered,
    ]


def _exception_rendered(logger: Any, method: str, event_dict: EventDict) -> EventDict:
    """structlog's ``format_exc_info``, called only for a line that carries ``exc_info``
    (``log.exception``, a library's record with a traceback): it leaves any other line as it
    is, without the work of finding there is nothing to render."""
    if "exc_info" in event_dict:
        return structlog.processors.format_exc_info(logger, method, event_dict)
    return event_dict


class UtcStamper:
    """The ``timestamp`` of a line, exactly as structlog's ``TimeStamper(fmt="iso",
    utc=True)`` writes it (``2026-01-02T03:04:05.123456Z``; at a whole second
    ``2026-01-02T03:04:05Z``, as ``datetime.isoformat`` has it), with the date and time up
    to the second formatted once per second, not for every line (a datetime, its isoformat
    and a replace per line), since the busiest services log a line per decision. The clock
    is the system clock in ns, floored to µs as ``datetime.now``."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self.clock = clock
        # The second last formatted and its text, one tuple: a thread logging meanwhile
        # reads both of the same second.
        self.formatted: tuple[int, str] = (-1, "")

    def __call__(
        self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event_dict["timestamp"] = self.stamp(self.clock())
        return event_dict

    def stamp(self, ns: int) -> str:
        second, micro = divmod(ns // 1000, 1_000_000)
        formatted, prefix = self.formatted
        if second != formatted:
            prefix = datetime.fromtimestamp(second, UTC).isoformat().removesuffix("+00:00")
            self.formatted = (second, prefix)
        return f"{prefix}.{micro:06d}Z" if micro else f"{prefix}Z"


# What structlog's merge_contextvars reads: its context variables, by their name's prefix.
_CONTEXT_PREFIX = structlog.contextvars.STRUCTLOG_KEY_PREFIX
_CONTEXT_PREFIX_LENGTH = len(_CONTEXT_PREFIX)
# add_log_level's level of a method whose name is not its level.
_LEVEL_NAMES = {"warn": "warning", "exception": "error"}


class JsonLine:
    """Berth's processor chain in one processor: ``_processors()`` then the JSON bytes from
    msgspec's encoder (``enc_hook=str``), as a ``JSONRenderer`` would render them, without
    structlog's generic loop around each: a service logs a line per decision.
    :func:`berth_bound_logger`'s ``info`` calls it directly when it is the whole chain."""

    def __init__(self, stamper: UtcStamper | None = None) -> None:
        self.stamper = stamper or UtcStamper()

    def __call__(self, logger: Any, method: str, event_dict: EventDict) -> bytes:
        """The steps of ``_processors(self.stamper)``, in its order, each inline (no call
        per processor): structlog's ``merge_contextvars`` (a context variable never replaces
        a key the line has), ``add_log_level`` (``warn`` is ``warning``, ``exception``
        ``error``), the stamper, :func:`_exception_rendered`."""
        for var, value in contextvars.copy_context().items():
            name = var.name
            if name.startswith(_CONTEXT_PREFIX) and value is not Ellipsis:
                event_dict.setdefault(name[_CONTEXT_PREFIX_LENGTH:], value)
        event_dict["level"] = _LEVEL_NAMES.get(method, method)
        stamper = self.stamper
        event_dict["timestamp"] = stamper.stamp(stamper.clock())
        if "exc_info" in event_dict:
            event_dict = structlog.processors.format_exc_info(logger, method, event_dict)
        return _ENCODER.encode(event_dict)


def berth_bound_logger(min_level: int) -> type[Any]:
    """structlog's filtering bound logger at ``min_level``, whose ``info`` (when that level
    logs at all) renders a line with the one :class:`JsonLine` processor directly: the event
    dict built as structlog builds it (the bound context, the keywords, then ``event``),
    that processor's bytes handed to the logger's ``info``. A call with positional
    arguments, or while the chain is anything else (a test's ``capture_logs``), takes
    structlog's own path."""
    base: type[Any] = structlog.make_filtering_bound_logger(min_level)
    if min_level > logging.INFO:
        return base
    structlogs_info = base.info

    def info(self: Any, event: str, *args: Any, **kw: Any) -> Any:
        processors = self._processors
        if args or len(processors) != 1 or type(processors[0]) is not JsonLine:
            return structlogs_info(self, event, *args, **kw)
        # As structlog builds it (context, keywords, then event), in one expression.
        event_dict = {**self._context, **kw, "event": event}
        return self._logger.info(processors[0](self._logger, "info", event_dict))

    return type(f"Berth{base.__name__}", (base,), {"info": info})


def configure_logging(*, service: str, level: str | None = None) -> None:
    """Set up JSON logging for a service process; safe to call more than once."""
    global _configured
    level_name = (level or os.environ.get("BERTH_LOG_LEVEL", "info")).upper()
    numeric = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    structlog.configure(
        processors=[JsonLine()],  # _processors() and the JSON renderer, in one
        wrapper_class=berth_bound_logger(numeric),
        logger_factory=lambda *_: _LINES,  # on stderr as it is now (a test may replace it)
        cache_logger_on_first_use=True,
    )
    _LINES.flush()
    _LINES.file = sys.stderr.buffer
    structlog.contextvars.bind_contextvars(service=service)
    handler = _ThroughLines()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
            foreign_pre_chain=[*_processors(), structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.WARNING))  # third-party chatter only when it matters
    _configured = True


class LoopBatchedLines:
    """structlog's logger: each rendered line to ``file``; the lines written during one turn
    of the event loop go out together, in one write, first thing in the next turn (or at
    once when :data:`HELD_LIMIT` are held: a pass of many decisions holds no more).

    Why: a line was a write system call of its own, and a service logs a line per decision,
    thousands per batch. No line waits for anything new (an I/O event, a timer): the write
    comes before them. Outside a running loop (the CLI, another thread) a line is written at
    once, after any still held; lines still held when the process exits are written then
    (:func:`flush_logs`). Lines keep the order they were logged in.
    """

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.held: list[bytes] = []
        self.flush_on: asyncio.AbstractEventLoop | None = None  # the loop due to write them
        self.flush_thread = 0  # the thread ``flush_on`` ran on when the write was asked of it
        self.lock = threading.Lock()  # a thread's line never lands inside another's write

    def msg(self, message: bytes) -> None:
        with self.lock:
            self.held.append(message)
            if len(self.held) >= HELD_LIMIT:
                self._write_held()
            elif not self._write_due_here():
                try:
                    loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
                except RuntimeError:
                    loop = None
                if loop is None:
                    self._write_held()
                elif self.flush_on is not loop:  # (a closed loop left lines to this one)
                    loop.call_soon(self.flush)
                    self.flush_on, self.flush_thread = loop, threading.get_ident()

    def _write_due_here(self) -> bool:
        """Whether this thread's running loop is already due to write the held lines: the
        loop asked to is still running, and on this thread (a thread runs one loop at a
        time). Then a line is only held: not asking asyncio for the running loop, a getpid
        system call in CPython 3.11, saves that per line."""
        flush_on = self.flush_on
        return (
            flush_on is not None
            and self.flush_thread == threading.get_ident()
            and flush_on.is_running()
        )

    log = debug = info = warn = warning = error = err = critical = exception = fatal = msg

    def flush(self) -> None:
        """Write the held lines, in order, in one write."""
        with self.lock:
            self._write_held()

    def _write_held(self) -> None:
        self.flush_on = None
        if self.held:
            lines, self.held = self.held, []
            lines.append(b"")
            self.file.write(b"\n".join(lines))
            self.file.flush()


class _ThroughLines(logging.Handler):
    """The standard library's records (nats, aiohttp...) written in turn with Berth's own."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _LINES.msg(self.format(record).encode())
        except Exception:  # logging's rule: a record that fails is reported, never raised
            self.handleError(record)


_LINES = LoopBatchedLines(sys.stderr.buffer)
atexit.register(_LINES.flush)


def flush_logs() -> None:
    """Write every held line now (before ``os._exit``, which runs no exit hook)."""
    _LINES.flush()


_ENCODER = msgspec.json.Encoder(enc_hook=str)  # anything else JSON does not have: its str()


def get_logger(name: str) -> Any:
    """A structlog logger named after the module's activity (``admission.loop``...)."""
    return _Logger(structlog.get_logger(component=name))


# What a line is logged with (a logger's level methods).
_LEVEL_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "err", "exception", "critical", "fatal", "msg"}
)


class _Logger:
    """structlog's lazy proxy (:func:`get_logger`: assembled on first use, as configured
    then) whose level methods, once structlog keeps the assembled logger
    (``cache_logger_on_first_use``), are kept here too: then ``log.info`` is an attribute
    of this object, not the proxy's failed attribute lookup and ``bind()`` per line.
    Anything else is the proxy's."""

    def __init__(self, proxy: Any) -> None:
        self._proxy = proxy

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._proxy, name)
        if name in _LEVEL_METHODS and structlog.get_config()["cache_logger_on_first_use"]:
            setattr(self, name, value)  # the kept logger's: what the proxy gives from now on
        return value
