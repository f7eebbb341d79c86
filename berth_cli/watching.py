"""`-w/--watch`: show a listing, then poll it and print each row again when it changes.

Polling (once a second) rather than following the stream: what `get` shows is admission's
current view (positions, reasons, usage) or the config bucket, neither of which the event
stream carries whole. Ctrl-C (or SIGTERM) ends a watch with exit 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

import yaml

__all__ = ["POLL_SECONDS", "RowPrinter", "until_stopped", "watch"]

POLL_SECONDS = 1.0

# One poll: the headers, then (key, row, object) for each object listed.
Snapshot = tuple[list[str], list[tuple[Hashable, list[Any], dict[str, Any]]]]


class RowPrinter:
    """kubectl's `get -w`: the table once, then a row again whenever it changes; AGE alone
    changing is no change. Columns keep the first table's widths (a wider value pushes on)."""

    def __init__(self, headers: Sequence[str]) -> None:
        self.headers = list(headers)
        self.widths = [len(header) for header in headers]
        self.age = self.headers.index("AGE") if "AGE" in self.headers else None
        self.seen: dict[Hashable, tuple[str, ...]] = {}
        self.started = False

    def _line(self, cells: Sequence[Any]) -> str:
        text = ["" if cell is None else str(cell) for cell in cells]
        return "  ".join(c.ljust(w) for c, w in zip(text, self.widths, strict=False)).rstrip()

    def _signature(self, row: Sequence[Any]) -> tuple[str, ...]:
        return tuple(str(cell) for index, cell in enumerate(row) if index != self.age)

    def lines(self, rows: Sequence[tuple[Hashable, Sequence[Any]]]) -> list[str]:
        """The lines to print for this poll: the header and every row the first time, then
        only the rows that changed."""
        out: list[str] = []
        if not self.started and rows:
            for _, row in rows:
                self.widths = [max(w, len(str(c))) for w, c in zip(self.widths, row, strict=False)]
            out.append(self._line(self.headers))
            self.started = True
        for key, row in rows:
            signature = self._signature(row)
            if self.seen.get(key) != signature:
                self.seen[key] = signature
                out.append(self._line(row))
        return out


def until_stopped() -> asyncio.Event:
    """An event set by Ctrl-C or SIGTERM, so a loop can end cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def watch(poll: Callable[[], Awaitable[Snapshot]], *, output: str | None, empty: str) -> None:
    """Print the first listing and every change until stopped (``-o json``: each changed
    object as one line of JSON; ``-o yaml``: as one YAML document)."""
    stop = until_stopped()
    printer: RowPrinter | None = None
    objects: dict[Hashable, str] = {}
    first = True
    while not stop.is_set():
        headers, listed = await poll()
        if output in ("json", "yaml"):
            for key, _, obj in listed:
                text = json.dumps(obj, separators=(",", ":"))
                if objects.get(key) != text:
                    objects[key] = text
                    shown = text if output == "json" else "---\n" + yaml.safe_dump(obj).rstrip()
                    print(shown, flush=True)
        else:
            printer = printer or RowPrinter(headers)
            if first and not listed:
                print(empty, flush=True)
            for line in printer.lines([(key, row) for key, row, _ in listed]):
                print(line, flush=True)
        first = False
        try:
            await asyncio.wait_for(stop.wait(), POLL_SECONDS)
        except TimeoutError:
            pass
