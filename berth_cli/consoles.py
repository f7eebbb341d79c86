"""Where the CLI prints tables: rich's console, as wide as a line needs."""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console

__all__ = ["console_for"]


def console_for(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout by default) as wide as each line needs, styled only on a
    terminal: a table's cells are never cut, as kubectl cuts none. Why: rich fits a table to
    the terminal's width (80 columns off a terminal), and `berth up > up.log` or `berth creds
    init DIR | cat` printed paths and names cut short, which a user copies from there."""
    out = file or sys.stdout
    return Console(file=out, width=100_000, highlight=False, force_terminal=out.isatty())
