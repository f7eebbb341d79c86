"""Third-party modules a library imports at its own import but uses only on rare paths.

nats-py's ``nats/aio/transport.py`` runs a bare ``import aiohttp`` at its import, for its
WebSocket transport only (Berth speaks nats://): about 0.1 s of CPU at the start of every
process that talks to the bus. The rule (``WITHIN`` names where it applies, ``run_deferring``
applies it): while such a module's code runs, and only then, each name it imports but rarely
uses is bound in ``sys.modules`` to a stand-in whose attributes are the real module's, imported
on the first ask by ``importlib.import_module``. Once that code has run, the name is removed
from ``sys.modules``, so every other ``import aiohttp`` or ``import aiohttp.X``, in any module
and thread, is the import system's own, with its own locks: the module loads once and whole,
and ``except``/``isinstance`` against its classes hold. A module kept in ``sys.modules`` whose
code runs later does not give that: the import system checks that ``aiohttp.X`` is not loaded
before it asks the package for ``__path__``, so a package run by that ask loads ``aiohttp.X``
a second time; and another thread can see it half run. (The stdlib's
``importlib.util.LazyLoader`` runs the module at a bare import of it on 3.11.)

Limit: a thread importing ``aiohttp`` while nats' transport module runs (once per process, at
its first import of nats) can get the stand-in; its attributes are still the real module's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import Any

__all__ = ["WITHIN", "install", "run_deferring"]

# {module whose code runs with names deferred: the names it imports but rarely uses}
WITHIN: dict[str, tuple[str, ...]] = {"nats.aio.transport": ("aiohttp",)}


class _StandIn(types.ModuleType):
    """What the running module binds for a deferred name: each attribute asked of it (the
    first one imports the real module) is the real module's."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:  # asked while the importer runs: a real import now
            del sys.modules[name]
        return getattr(importlib.import_module(name), attr)


def run_deferring(
    loader: importlib.abc.Loader, module: types.ModuleType, names: Sequence[str]
) -> None:
    """Run ``module``'s code with ``loader``, each of ``names`` that is installed and not yet
    imported bound in sys.modules to a stand-in, and only while that code runs (the module
    docstring says why)."""
    stand_ins = {
        name: _StandIn(name)
        for name in names
        if name not in sys.modules and importlib.util.find_spec(name) is not None
    }
    sys.modules.update(stand_ins)
    try:
        loader.exec_module(module)
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


class _Loader(importlib.abc.Loader):
    """The module's own loader, its code run by ``run_deferring``; the module keeps its own
    loader once run."""

    def __init__(self, loader: importlib.abc.Loader, names: Sequence[str]) -> None:
        self.loader = loader
        self.names = names

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        run_deferring(self.loader, module, self.names)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds a module named in ``WITHIN`` as the other finders do, with ``_Loader`` over its
    loader; any other module is left to them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        names = WITHIN.get(fullname)
        if names is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, names)
                return spec  # type: ignore[no-any-return]
        return None


def install() -> None:
    """Put the finder first on sys.meta_path, once (before nats is first imported)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
