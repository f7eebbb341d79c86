"""The console's pages: each a :class:`~berth_console.pages.base.View` that renders its live
regions; ``layout.py`` wraps a view's body in the common page."""
