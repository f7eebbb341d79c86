"""Modules shared by Berth's services, CLI and console (DESIGN.md)."""

from shared.deferred import install

install()  # before any module here imports nats (shared/deferred.py says why)
