"""Modules shared by Berth's services, CLI and console (DESIGN.md)."""

from shared.deferred import DEFERRED, defer_import

for _name in DEFERRED:  # before any module here imports nats (shared/deferred.py says why)
    defer_import(_name)
