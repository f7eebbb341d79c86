"""A tiny auto-escaping template helper in :class:`string.Template`'s syntax (``$name``).

Every value put into a template is HTML-escaped unless it is :class:`Markup` (already safe
HTML made here), so data from the bus (names, reasons, log lines) can never become markup.
A template is split into its literal parts and placeholders once, the first time it is
used: filling one is then a join, not a regular-expression pass (the overview fills ten
thousand small templates; ``Template.substitute`` was half its render time).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from string import Template
from typing import Any

__all__ = ["Markup", "escape", "join", "render"]


class Markup(str):
    """A string that is safe HTML: inserted into a template as it is."""

    __slots__ = ()


def escape(value: Any) -> Markup:
    """``value`` as text in HTML (quotes included, so it is safe in attributes too)."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, int | float):  # nothing to escape in a number (bool is an int)
        return Markup(value)
    return Markup(html.escape("" if value is None else str(value), quote=True))


# A compiled template: literal text at even positions, placeholder names at odd ones.
_compiled: dict[str, list[str]] = {}


def _compile(template: str) -> list[str]:
    parts: list[str] = []
    literal: list[str] = []
    position = 0
    for match in Template.pattern.finditer(template):
        literal.append(template[position : match.start()])
        position = match.end()
        if match.group("escaped") is not None:
            literal.append("$")
            continue
        name = match.group("named") or match.group("braced")
        if name is None:
            raise ValueError(f"invalid placeholder in template at {match.start()}: {template!r}")
        parts += ["".join(literal), name]
        literal = []
    literal.append(template[position:])
    parts.append("".join(literal))
    return parts


def render(template: str, **values: Any) -> Markup:
    """Fill ``$name`` placeholders, escaping every value that is not :class:`Markup`."""
    parts = _compiled.get(template)
    if parts is None:
        parts = _compiled[template] = _compile(template)
    filled = parts[:]
    for index in range(1, len(filled), 2):
        filled[index] = escape(values[filled[index]])
    return Markup("".join(filled))


def join(parts: Iterable[Markup], separator: str = "") -> Markup:
    """Concatenate pieces of markup."""
    return Markup(separator.join(parts))
