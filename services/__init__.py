"""Berth's services (DESIGN.md)."""

import shared  # noqa: F401  # first: defers what shared/deferred.py names, before nats is imported
