"""Event ids: random version-4 UUIDs in hex, drawn many at a time (:func:`new_event_id`)."""

from __future__ import annotations

import os

__all__ = ["new_event_id"]

_IDS_PER_DRAW = 256
_IDS: list[str] = []  # drawn, not given yet
os.register_at_fork(after_in_child=_IDS.clear)
# Version 4 and RFC 4122's variant: byte 6's high nibble 0100, byte 8's high bits 10.
_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT_RFC_4122 = bytes((b & 0x3F) | 0x80 for b in range(256))


def new_event_id() -> str:
    """A random UUID (version 4) in hex, as ``uuid.uuid4().hex``, without a UUID object:
    taken from ids drawn :data:`_IDS_PER_DRAW` at a time (:func:`_drawn_ids`), so a service
    that names an event per decision pays one ``os.urandom`` system call per draw, not per
    id. Each id is still 122 random bits of the OS's source, used once: a forked child
    forgets the ids its parent had drawn (they would be the parent's next ones)."""
    try:
        return _IDS.pop()  # atomic: a thread never takes an id another one took
    except IndexError:
        pass
    ids = _drawn_ids(_IDS_PER_DRAW)
    value = ids.pop()
    _IDS.extend(ids)
    return value


def _drawn_ids(count: int) -> list[str]:
    """``count`` random version-4 UUIDs in hex, from one ``os.urandom`` read."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = raw[6::16].translate(_VERSION_4)
    raw[8::16] = raw[8::16].translate(_VARIANT_RFC_4122)
    text = raw.hex()
    return [text[at : at + 32] for at in range(0, len(text), 32)]
