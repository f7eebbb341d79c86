"""Inline SVG: a quota bar per flavor and resource, a pending-over-time sparkline per queue.

Colours come from classes in console.css, not attributes, so the legend and the bars cannot
disagree; each picture carries a text alternative (``aria-label`` and ``<title>``).
"""

from __future__ import annotations

from collections.abc import Sequence

from berth_console.markup import Markup, render
from berth_console.quota import Quota, show

__all__ = ["quota_bar", "sparkline"]

BAR_WIDTH = 240
BAR_HEIGHT = 14


def _x(value: int, scale: int) -> str:
    return f"{BAR_WIDTH * value / scale:.1f}"


def quota_label(quota: Quota) -> str:
    """The bar's numbers as a sentence (its text alternative, and the tooltip)."""
    r = quota.resource
    parts = [
        f"{r} in {quota.flavor}: {show(r, quota.used)} of {show(r, quota.nominal)} in use",
        f"{show(r, quota.borrowed)} borrowed",
        f"{show(r, quota.lent)} lent",
    ]
    if quota.borrowing_limit is not None:
        parts.append(f"borrowing limit {show(r, quota.borrowing_limit)}")
    if quota.lending_limit is not None:
        parts.append(f"lending limit {show(r, quota.lending_limit)}")
    return ", ".join(parts)


def quota_bar(quota: Quota) -> Markup:
    """Own use, then lent, then free quota up to the nominal mark; borrowed beyond it."""
    scale = max(quota.nominal + quota.borrowed, quota.used, 1)
    own = max(quota.own_used, 0)
    lent = min(quota.lent, max(quota.nominal - own, 0))
    segments = [
        ("free", 0, quota.nominal),
        ("used", 0, own),
        ("lent", own, lent),
        ("borrowed", quota.nominal, quota.borrowed),
    ]
    rects = "".join(
        f'<rect class="{kind}" x="{_x(start, scale)}" y="0" width="{_x(size, scale)}"'
        f' height="{BAR_HEIGHT}"/>'
        for kind, start, size in segments
        if size > 0
    )
    mark = _x(quota.nominal, scale)
    label = quota_label(quota)
    return render(
        '<svg class="bar" role="img" aria-label="$label" width="$w" height="$h"'
        ' viewBox="0 0 $w $h"><title>$label</title><rect class="track" x="0" y="0"'
        ' width="$w" height="$h"/>$rects<line class="nominal" x1="$mark" x2="$mark" y1="0"'
        ' y2="$h"/></svg>',
        label=label,
        w=BAR_WIDTH,
        h=BAR_HEIGHT,
        rects=Markup(rects),
        mark=mark,
    )


SPARK_WIDTH = 120
SPARK_HEIGHT = 28


def sparkline(samples: Sequence[tuple[float, int]]) -> Markup:
    """Pending workloads over time (one point per sample, newest on the right)."""
    if not samples:
        return render('<span class="muted">no samples yet</span>')
    values = [value for _, value in samples]
    peak = max(max(values), 1)
    minutes = max((samples[-1][0] - samples[0][0]) / 60, 0)
    step = SPARK_WIDTH / max(len(values) - 1, 1)
    points = " ".join(
        f"{index * step:.1f},{SPARK_HEIGHT - 2 - (SPARK_HEIGHT - 4) * value / peak:.1f}"
        for index, value in enumerate(values)
    )
    if len(values) == 1:
        points += f" {SPARK_WIDTH},{points.split(',')[1]}"
    label = (
        f"Pending over the last {minutes:.0f} min: now {values[-1]}, peak {max(values)},"
        f" low {min(values)}"
    )
    return render(
        '<svg class="spark" role="img" aria-label="$label" width="$w" height="$h"'
        ' viewBox="0 0 $w $h"><title>$label</title><polyline points="$points"/></svg>',
        label=label,
        w=SPARK_WIDTH,
        h=SPARK_HEIGHT,
        points=points,
    )
