"""What every page is: a view rendering named regions, first whole, then live.

A view renders a :class:`Snapshot`: its regions (id -> inner HTML) and, for regions that grow
(the event feed, a timeline, logs), what to add to them. The first full page and the live
stream use the same view code, so a page and its updates cannot disagree: the stream sends a
region again only when its HTML changed, and the whole body when its ``structure`` (say, the
list of ClusterQueues) did.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

from berth_console.markup import Markup, escape, render
from berth_console.model import Model
from berth_console.pending import PendingCache
from berth_console.queries import Queries

__all__ = [
    "Addition",
    "Context",
    "Snapshot",
    "View",
    "badge",
    "empty_row",
    "escape",
    "link",
    "options",
    "path_part",
]


@dataclass(frozen=True, slots=True)
class Addition:
    region: str
    html: Markup
    at: Literal["start", "end"] = "end"


@dataclass(slots=True)
class Snapshot:
    regions: dict[str, Markup]
    structure: Hashable = None
    additions: list[Addition] = field(default_factory=list)


@dataclass(slots=True)
class Context:
    """What pages read from: the model, the bus's questions, and whether actions are on."""

    model: Model
    queries: Queries | None
    pending: PendingCache
    actions_enabled: bool = False


SHARED_SNAPSHOTS = 32  # the snapshots of shared pages kept (distinct filters)


class View(abc.ABC):
    """One page. ``topics``: the model changes it follows; ``poll_s``: it also renders this
    often without a change (logs, durations that tick); ``share_s``: a page that looks the
    same to every browser (no additions, no state of its own) shares its snapshot with every
    other browser on it while its topics do not move, for at most this long."""

    title: str = ""
    nav: str = ""
    topics: tuple[str, ...] = ()
    poll_s: float | None = None
    share_s: float | None = None

    def __init__(self, context: Context) -> None:
        self.context = context

    @property
    def model(self) -> Model:
        return self.context.model

    def share_key(self) -> str:
        """What makes two views of a shared page alike (its class and its filters)."""
        return type(self).__name__

    async def current(self) -> Snapshot:
        """The snapshot to show now: rendered, or a shared one still current. Why: a hundred
        browsers on the overview cost one render per change, not a hundred."""
        if self.share_s is None:
            return await self.snapshot()
        cache = self.model.snapshots
        key = self.share_key()
        versions = self.model.changes.versions(self.topics)  # before rendering: a change
        now = time.monotonic()  # during the render makes the next call render again
        hit = cache.get(key)
        if hit is not None and hit[0] == versions and now - hit[1] < self.share_s:
            shared: Snapshot = hit[2]
            return shared
        snapshot = await self.snapshot()
        cache.pop(key, None)
        cache[key] = (versions, now, snapshot)
        while len(cache) > SHARED_SNAPSHOTS:
            del cache[next(iter(cache))]  # the oldest
        return snapshot

    @abc.abstractmethod
    async def snapshot(self) -> Snapshot:
        """The regions as they are now (and what grew since the last snapshot)."""

    @abc.abstractmethod
    def body(self, snapshot: Snapshot) -> Markup:
        """The page's main content with every region filled in."""


def link(href: str, text: object) -> Markup:
    return render('<a href="$href">$text</a>', href=href, text=text)


def badge(text: str, kind: str = "") -> Markup:
    return render('<span class="badge $kind">$text</span>', kind=kind or text, text=text)


def empty_row(columns: int, text: str) -> Markup:
    return render(
        '<tr class="empty"><td colspan="$n" class="muted">$text</td></tr>', n=columns, text=text
    )


def path_part(value: str) -> str:
    """A name as one URL path segment (Kubernetes names need no quoting, others might)."""
    return quote(value, safe="")


def options(values: list[str], selected: str, *, blank: str) -> Markup:
    """``<option>``s for a filter, the current one selected, a first one meaning "any"."""
    items = [render('<option value="">$blank</option>', blank=blank)]
    for value in values:
        mark = Markup(" selected") if value == selected else Markup("")
        items.append(render('<option value="$v"$s>$v</option>', v=value, s=mark))
    return Markup("".join(items))
