"""A tiny auto-escaping template helper around :class:`string.Template`.

Every value put into a template is HTML-escaped unless it is :class:`Markup` (already safe
HTML made here), so data from the bus (names, reasons, log lines) can never become markup.
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
    return Markup(html.escape("" if value is None else str(value), quote=True))


_templates: dict[str, Template] = {}


def render(template: str, **values: Any) -> Markup:
    """Fill ``$name`` placeholders, escaping every value that is not :class:`Markup`."""
    compiled = _templates.get(template)
    if compiled is None:
        compiled = _templates[template] = Template(template)
    return Markup(compiled.substitute({key: escape(value) for key, value in values.items()}))


def join(parts: Iterable[Markup], separator: str = "") -> Markup:
    """Concatenate pieces of markup."""
    return Markup(separator.join(parts))
