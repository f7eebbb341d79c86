"""shared/deferred.py: an import run ``standing_in`` names runs with them bound to stand-ins,
only while it runs; every other import of them is the import system's own; ``hidden`` makes a
name read as not installed while an import runs. Each case
builds, in a temporary directory, a package ``dep`` (its ``__init__`` imports its submodule
``dep.errors``, as aiohttp's does), an importer ``user`` (``import dep``, as nats' transport
module's ``import aiohttp``) and a module ``gate`` recording which module ran and holding a
package's run open while a test needs it."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from shared import deferred

FILES = {
    "gate.py": (
        "import threading\n"
        "RAN = []\n"
        "HOLD = False\n"
        "ENTERED = threading.Event()\n"
        "RELEASE = threading.Event()\n"
    ),
    "dep/__init__.py": (
        "import gate\n"
        "gate.RAN.append(__name__)\n"
        "if gate.HOLD:\n"
        "    gate.ENTERED.set()\n"
        "    gate.RELEASE.wait(30)\n"
        "from dep.errors import DepError, DepFailure\n"
        "VALUE = 'dep'\n"
    ),
    "dep/errors.py": (
        "import gate\n"
        "gate.RAN.append(__name__)\n"
        "class DepError(Exception): pass\n"
        "class DepFailure(DepError): pass\n"
    ),
    "broken/__init__.py": "import gate\ngate.RAN.append(__name__)\nimport no_such_module_for_berth\n",
    "user.py": (
        "import dep\n"
        "import broken\n"
        "try:\n"
        "    import no_such_module_for_berth as missing\n"
        "except ImportError:\n"
        "    missing = None\n"
    ),
}
NAMES = ("gate", "dep", "dep.errors", "broken", "user")


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The ``gate`` module; ``import_user()`` imports ``user`` with ``dep``, ``broken`` and a
    name not installed standing in."""
    for file, text in FILES.items():
        (tmp_path / file).parent.mkdir(exist_ok=True)
        (tmp_path / file).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("gate")
    finally:
        for name in NAMES:
            sys.modules.pop(name, None)


def import_user() -> ModuleType:
    """``user`` imported as shared/__init__.py imports nats' transport module."""
    with deferred.standing_in(("dep", "broken", "no_such_module_for_berth")):
        return importlib.import_module("user")


def test_the_importer_runs_without_loading_and_leaves_sys_modules_alone(
    modules: ModuleType,
) -> None:
    user = import_user()
    assert modules.RAN == [], "importing the importer ran none of the deferred modules"
    assert "dep" not in sys.modules and "broken" not in sys.modules, "bound only while it ran"
    assert user.missing is None, "a name not installed is not bound: the importer's ImportError"


def test_first_use_through_the_importer_loads_the_real_module_once(modules: ModuleType) -> None:
    user = import_user()
    assert user.dep.VALUE == "dep" and user.dep.DepError is sys.modules["dep"].DepError
    assert user.dep.errors is sys.modules["dep.errors"]
    assert modules.RAN == ["dep", "dep.errors"], "each ran once"


# (what imports dep first after the importer ran, why it is a case)
FIRST_IMPORTS = [
    ("from dep.errors import DepError", "the submodule, which the package's __init__ imports"),
    ("import dep.errors", "the submodule, bare"),
    ("import dep", "the package"),
    ("from dep import DepError", "a name from the package"),
]


@pytest.mark.parametrize(
    ("statement", "why"), FIRST_IMPORTS, ids=[str(i) for i in range(len(FIRST_IMPORTS))]
)
def test_an_import_elsewhere_loads_each_module_once(
    modules: ModuleType, statement: str, why: str
) -> None:
    user = import_user()
    exec(statement, {})  # the statement under test, as another module runs it
    dep, errors = sys.modules["dep"], sys.modules["dep.errors"]
    assert modules.RAN == ["dep", "dep.errors"], f"{why}: each ran once"
    assert dep.errors is errors and dep.DepError is errors.DepError, why
    assert user.dep.DepFailure is errors.DepFailure, why
    with pytest.raises(errors.DepError):  # an except clause against the submodule's class holds
        raise user.dep.DepFailure("raised through the importer's binding")


def test_two_threads_using_it_at_once_both_get_the_whole_module(modules: ModuleType) -> None:
    """The first thread's load is held open while a second one asks: the second waits on the
    import system's lock and gets the loaded module, never a half-run one."""
    user = import_user()
    vars(modules)["HOLD"] = True  # the package waits for RELEASE
    got: dict[str, object] = {}

    def use(who: str) -> None:
        try:
            got[who] = user.dep.VALUE
        except BaseException as error:  # recorded for the assertion below
            got[who] = error

    first = threading.Thread(target=use, args=("first",))
    first.start()
    assert modules.ENTERED.wait(30), "the first thread is running the package"
    second = threading.Thread(target=use, args=("second",))
    second.start()
    second.join(0.2)  # a half-run module would have failed it by now
    modules.RELEASE.set()
    first.join(30)
    second.join(30)
    assert got == {"first": "dep", "second": "dep"}
    assert modules.RAN == ["dep", "dep.errors"], "ran once"


def test_a_failed_load_raises_the_original_import_error_each_time(modules: ModuleType) -> None:
    user = import_user()
    for attempt in range(2):
        with pytest.raises(ModuleNotFoundError) as raised:
            user.broken.anything  # noqa: B018
        assert raised.value.name == "no_such_module_for_berth", f"attempt {attempt}"
        assert "broken" not in sys.modules, "as a failed import, nothing half-run is kept"
    assert modules.RAN == ["broken", "broken"], "each use tries the import again"


def test_a_module_already_imported_is_bound_itself(modules: ModuleType) -> None:
    dep = importlib.import_module("dep")
    assert import_user().dep is dep


# (imported before the block, why)
HIDDEN_CASES = [
    (False, "not imported yet: reads as not installed while the block runs, importable after"),
    (True, "imported already: the process keeps it, the block changes nothing"),
]


@pytest.mark.parametrize(("imported", "why"), HIDDEN_CASES, ids=["fresh", "imported"])
def test_hidden_reads_as_not_installed_only_while_the_block_runs(
    modules: ModuleType, imported: bool, why: str
) -> None:
    if imported:
        importlib.import_module("dep")
    with deferred.hidden("dep"):
        if imported:
            assert importlib.import_module("dep").VALUE == "dep", why
        else:
            with pytest.raises(ImportError):
                importlib.import_module("dep")
    assert importlib.import_module("dep").VALUE == "dep", why
