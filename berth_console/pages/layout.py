"""The frame of every page: head, navigation, the live indicator, the main landmark."""

from __future__ import annotations

from berth_console.markup import Markup, join, render

__all__ = ["page"]

NAV = (
    ("overview", "/", "Overview"),
    ("workloads", "/workloads", "Workloads"),
    ("jobs", "/jobs", "Managed jobs"),
    ("events", "/events", "Events"),
)

NO_NOTICE = Markup("")
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title · Berth</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head>
<body data-stream="$stream">
<a class="visually-hidden" href="#main">Skip to the content</a>
<header class="top">
<a class="brand" href="/">Berth</a>
<nav aria-label="Main"><ul>$nav</ul></nav>
$status
</header>
<main id="main">
$notice<div id="page">$body</div>
</main>
</body>
</html>
"""


def page(*, title: str, nav: str, body: Markup, stream: str, notice: Markup = NO_NOTICE) -> Markup:
    """A whole page; ``stream`` is the URL of its live updates (server-sent events)."""
    items = join(
        render(
            '<li><a href="$href"$current>$label</a></li>',
            href=href,
            label=label,
            current=Markup(' aria-current="page"') if key == nav else Markup(""),
        )
        for key, href, label in NAV
    )
    status = (
        Markup('<span id="live-status" role="status" data-state="off">Not live</span>')
        if stream
        else NO_NOTICE
    )
    return render(
        _PAGE, title=title, stream=stream, nav=items, notice=notice, body=body, status=status
    )
