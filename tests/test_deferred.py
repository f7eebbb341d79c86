"""shared/deferred.py: a deferred module runs its code on first use, once, and otherwise
behaves as the import system's own. Each case builds a small package in a temporary
directory, defers it, and checks what a use of it does."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.deferred import defer_import, is_deferred

PACKAGE = {
    "__init__.py": "RUNS = RUNS + 1 if 'RUNS' in globals() else 1\nVALUE = 'package'\n",
    "part.py": "PART = True\n",
    "broken.py": "raise RuntimeError('broken at import')\n",
}


@pytest.fixture
def package(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"deferred_case_{request.node.name.split('[')[-1].rstrip(']').replace('-', '_')}"
    root = tmp_path / name
    root.mkdir()
    for file, text in PACKAGE.items():
        (root / file).write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]


def test_a_bare_import_runs_nothing_and_first_use_runs_it_once(package: str) -> None:
    defer_import(package)
    module = importlib.import_module(package)  # what nats' bare `import aiohttp` does
    assert is_deferred(package) and "VALUE" not in vars(module)
    assert module.VALUE == "package" and module.RUNS == 1
    assert not is_deferred(package) and sys.modules[package] is module
    assert module.VALUE == "package" and module.RUNS == 1, "runs once"


def test_a_submodule_import_runs_the_package_first(package: str) -> None:
    defer_import(package)
    assert importlib.import_module(f"{package}.part").PART
    assert vars(sys.modules[package])["RUNS"] == 1, "the package ran before its submodule"


def test_an_imported_module_is_left_as_it_is(package: str) -> None:
    module = importlib.import_module(package)
    defer_import(package)
    assert sys.modules[package] is module and not is_deferred(package)


def test_a_missing_module_is_not_bound() -> None:
    defer_import("no_such_module_for_berth")
    assert "no_such_module_for_berth" not in sys.modules


def test_a_failing_module_raises_on_use_and_leaves_sys_modules(package: str) -> None:
    name = f"{package}.broken"
    defer_import(package)
    importlib.import_module(package).VALUE  # noqa: B018  # the package itself runs
    defer_import(name)
    module = importlib.import_module(name)
    with pytest.raises(RuntimeError, match="broken at import"):
        module.anything  # noqa: B018
    assert name not in sys.modules, "as a failed import"
