"""Third-party modules imported by a library at its own import but used only on rare paths.

nats-py imports aiohttp at its import, for its WebSocket transport only (Berth speaks
nats://): about 0.1 s of CPU at the start of every process that talks to the bus. Deferred,
``import aiohttp`` binds a module whose code runs on its first use (a ws:// URL, the kube
backend's client, the console's web server, ``from aiohttp import web``), so only a process
that uses it pays for it.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from typing import Any

__all__ = ["DEFERRED", "defer_import", "is_deferred"]

DEFERRED = ("aiohttp",)
_RUNNING = threading.RLock()  # a deferred module run by another one's code


class _Deferred(types.ModuleType):
    """A module whose code has not run yet: it holds what the import system reads of a module
    in sys.modules (``__name__``, ``__spec__``...), and the first other attribute asked of it
    (``__path__`` included, which a submodule's import reads) runs its code in place."""

    def __getattr__(self, attr: str) -> Any:
        with _RUNNING:  # its code runs once, even when two threads ask at the same moment
            if type(self) is _Deferred:
                spec = self.__spec__
                assert spec is not None and spec.loader is not None  # defer_import checked
                object.__setattr__(self, "__class__", types.ModuleType)  # a plain module now
                if spec.submodule_search_locations is not None:
                    self.__path__ = spec.submodule_search_locations
                try:
                    spec.loader.exec_module(self)
                except BaseException:  # as a failed import: raised, and not left in sys.modules
                    if sys.modules.get(spec.name) is self:
                        del sys.modules[spec.name]
                    raise
        return getattr(self, attr)


def defer_import(name: str) -> None:
    """Bind ``name`` in sys.modules to a module whose code runs on its first attribute access,
    so a library's bare ``import name`` costs nothing until the module is used. Nothing changes
    for a module already imported or not installed."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    module.__dict__.pop("__path__", None)  # a submodule's import must run the package first
    module.__class__ = _Deferred
    sys.modules[name] = module


def is_deferred(name: str) -> bool:
    """Whether ``name`` is bound to a deferred module whose code has not run yet."""
    return isinstance(sys.modules.get(name), _Deferred)
