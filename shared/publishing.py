"""Moved to :mod:`shared.bus.acks`; this name stays until its last importer is moved."""

from shared.bus.acks import (
    NO_RESPONDERS,
    WRONG_LAST_SEQUENCE,
    Ack,
    AckTimeout,
    AckTracker,
    PublishRefused,
)

__all__ = [
    "NO_RESPONDERS",
    "WRONG_LAST_SEQUENCE",
    "Ack",
    "AckTimeout",
    "AckTracker",
    "PublishRefused",
]
