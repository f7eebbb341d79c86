"""What changed, by topic: the model bumps a topic's version; live pages wait for theirs.

Why versions and one shared wake-up rather than a queue per browser: a burst of ten thousand
events costs ten thousand integer increments and one wake-up of each waiting page, however
many browsers are open; each page then renders once for the whole burst (see ``live.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

__all__ = ["Changes"]


class Changes:
    """Per-topic version counters with a broadcast wake-up."""

    def __init__(self) -> None:
        self._versions: dict[str, int] = {}
        self._wake = asyncio.Event()
        self.closed = False

    def bump(self, *topics: str) -> None:
        for topic in topics:
            self._versions[topic] = self._versions.get(topic, 0) + 1
        # Wake every waiter, then give later waiters a fresh event to wait on.
        self._wake.set()
        self._wake = asyncio.Event()

    def versions(self, topics: Sequence[str]) -> tuple[int, ...]:
        return tuple(self._versions.get(topic, 0) for topic in topics)

    async def wait(self, topics: Sequence[str], seen: tuple[int, ...], *, within: float) -> bool:
        """Wait until one of ``topics`` moved past ``seen``; False after ``within`` seconds
        or on close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not self.closed and self.versions(topics) == seen:
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return False
        return not self.closed

    def close(self) -> None:
        """The console is stopping: every waiter returns now."""
        self.closed = True
        self._wake.set()
