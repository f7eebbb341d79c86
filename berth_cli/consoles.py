"""Where the CLI prints tables: rich's console, as wide as a line needs off a terminal."""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console

__all__ = ["console_for"]


def console_for(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout by default): the terminal's width on a terminal, else as
    wide as each line needs. Why: off a terminal rich assumes 80 columns and cuts a table's
    cells to fit, so `berth up > up.log` or `berth creds init DIR | cat` printed paths and
    names cut short, which a user copies from there."""
    out = file or sys.stdout
    return Console(file=out, highlight=False, width=None if out.isatty() else 100_000)
