"""Berth's services (DESIGN.md)."""

import shared  # noqa: F401  # first: shared/deferred.py applies before nats is imported
