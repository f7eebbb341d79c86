"""Modules a library imports at its own import but Berth's processes use rarely or never,
kept out of a process's start: the only two rules here, each applied around one import.

- :func:`standing_in`: nats-py's ``nats/aio/transport.py`` runs a bare ``import aiohttp`` at
  its import, for its WebSocket transport only (Berth speaks nats://). While that import
  runs, and only then, ``aiohttp`` is bound in ``sys.modules`` to a stand-in whose attributes
  are the real module's, imported on the first ask by ``importlib.import_module``. Once it
  has run, the name is removed from ``sys.modules``, so every other ``import aiohttp`` or
  ``import aiohttp.X``, in any module and thread, is the import system's own, with its own
  locks: the module loads once and whole, and ``except``/``isinstance`` against its classes
  hold. (A module kept in ``sys.modules`` whose code runs later does not give that: the import
  system checks that ``aiohttp.X`` is not loaded before it asks the package for ``__path__``,
  so a package run by that ask loads ``aiohttp.X`` a second time, and another thread can see
  it half run; the stdlib's ``importlib.util.LazyLoader`` runs the module at a bare import of
  it on 3.11.)
- :func:`hidden`: structlog's dev and tracebacks modules import rich (and pygments) for the
  console renderer and rich tracebacks, which Berth never uses (its lines are JSON, its
  exceptions go through ``format_exc_info``); while structlog is imported, rich reads as not
  installed.

shared/__init__.py and shared/logging.py apply them, so they hold for any process whose
first import of nats or structlog comes through ``shared``; one that imported them before
simply pays for the modules, as without this. Limit: another thread importing ``aiohttp``
while nats' transport module runs (once per process) can get the stand-in; its attributes are
still the real module's. The saving is measured in docs/kueue-benchmark.md ("Starting").
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["hidden", "standing_in"]


class _StandIn(types.ModuleType):
    """What the running import binds for a deferred name: each attribute asked of it (the
    first one imports the real module) is the real module's."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:  # asked while the importer runs: a real import now
            del sys.modules[name]
        return getattr(importlib.import_module(name), attr)


@contextmanager
def standing_in(names: Sequence[str]) -> Iterator[None]:
    """While the block runs (a library's import), each of ``names`` that is installed and not
    yet imported is bound in sys.modules to a stand-in (the module docstring says why);
    removed again after, whatever the block did."""
    stand_ins = {
        name: _StandIn(name)
        for name in names
        if name not in sys.modules and importlib.util.find_spec(name) is not None
    }
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


@contextmanager
def hidden(name: str) -> Iterator[None]:
    """While the block runs, ``name`` reads as not installed (``sys.modules[name] = None``,
    the import system's "not here"), unless it is imported already; importable again after."""
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(name, False) is None:
            del sys.modules[name]
