"""Header values the bus builds itself (message ids, expected sequences), in a form nats-py
cleans at no cost (:func:`header_value`).

Why: for every header of every message it publishes, nats-py's public ``Client.publish``
strips the value and replaces any CR or LF in it with a space (``str.strip``, then
``str.translate`` with a table of those two), so that no value can break the protocol. The
translate looks each distinct character of the value up in the table; for an event id that
costs more than the rest of the copy's publish together. A value known to hold no CR or LF and
no surrounding whitespace comes out of both unchanged, so :class:`HeaderValue` answers them
with itself. Nothing of nats-py's is reached into: it is given a ``str``, and its cleaning
gives exactly what it would give for the plain string.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HeaderValue", "header_value"]

_CR_LF = frozenset({ord("\r"), ord("\n")})


class HeaderValue(str):
    """A header value with no CR or LF and no leading or trailing whitespace (made only by
    :func:`header_value`): stripping it, or translating only CR and LF in it, changes
    nothing, so those return it as it is; anything else is ``str``'s own."""

    __slots__ = ()

    def strip(self, chars: str | None = None) -> str:
        return self if chars is None else str.strip(self, chars)

    def translate(self, table: Any) -> str:
        if isinstance(table, dict) and table.keys() <= _CR_LF:
            return self  # none of the characters it maps is in the value
        return str.translate(self, table)


def header_value(value: str) -> str:
    """``value`` as a :class:`HeaderValue` if it is one (no CR or LF, nothing to strip),
    else as it is (nats-py cleans it as ever)."""
    if "\r" in value or "\n" in value or value.strip() != value:
        return value
    return HeaderValue(value)
