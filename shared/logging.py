"""structlog, configured once per process: one JSON object per line on stderr.

Berth's own loggers use structlog's native bytes logger (fast: ~20 us a line); third-party
libraries that log through the standard library (nats, aiohttp, kubernetes_asyncio) are
routed through the same JSON renderer. Exceptions are rendered without frame locals, so no
secret in a local variable reaches the log.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]

_configured = False


def _processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]


def configure_logging(*, service: str, level: str | None = None) -> None:
    """Set up JSON logging for a service process; safe to call more than once."""
    global _configured
    level_name = (level or os.environ.get("BERTH_LOG_LEVEL", "info")).upper()
    numeric = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    structlog.configure(
        processors=[
            *_processors(),
            structlog.processors.JSONRenderer(serializer=_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.BytesLoggerFactory(sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    handler = logging.StreamHandler(sys.stderr)
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


def _dumps(obj: Any, **_: Any) -> bytes:
    import msgspec

    return msgspec.json.encode(obj, enc_hook=str)


def get_logger(name: str) -> Any:
    """A structlog logger named after the module's activity (``admission.loop``...)."""
    return structlog.get_logger(component=name)
