"""What a process must not import at its start: every module below costs CPU at each start of
each service process (the benchmark's service CPU, a pod's start, the suite's stacks) and is
used only on a rare path or never. Each entry point is imported in a fresh interpreter, as
``python -m`` starts it, and the modules it loaded are read from ``sys.modules``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

# nats-py's transport module imports aiohttp for its WebSocket transport only; it runs with a
# stand-in for it (shared/deferred.py), so neither aiohttp nor its modules are loaded.
AIOHTTP = {
    "aiohttp": "nats-py imports aiohttp for ws:// only (shared/deferred.py)",
    "aiohttp.client": "nats-py imports aiohttp for ws:// only (shared/deferred.py)",
}
WEB = {"aiohttp.web": "the probes are served by shared/probe_server.py"}
RICH = {
    "rich": "structlog's console renderer; Berth writes JSON lines (shared/logging.py)",
    "pygments": "rich's syntax highlighting, same reason as rich",
}
YAML = {"yaml": "only the CLI reads YAML (shared/config.load_documents imports it)"}
KUBE = {"kubernetes_asyncio": "the watcher's kube backend imports it when it runs"}
OTHERS = {
    "berth_cli": "a service imports only shared/ and its own package",
    "berth_console": "a service imports only shared/ and its own package",
    "click": "the CLI's argument parser",
}
SERVICE = AIOHTTP | WEB | RICH | YAML | KUBE | OTHERS

SERVICES = ("admission", "watcher", "preemption", "recovery")


def other_services(service: str) -> dict[str, str]:
    """Nothing imports a service from another service (the house rule)."""
    return {f"services.{other}": "another service" for other in SERVICES if other != service}


# (module imported at start, {module that must not be loaded: why})
ENTRY_POINTS = [
    *((f"services.{name}.__main__", SERVICE | other_services(name)) for name in SERVICES),
    ("berth_cli.main", AIOHTTP | WEB | KUBE),
    ("berth_console.__main__", RICH | YAML | KUBE),
]


def python(code: str) -> str:
    """What a fresh interpreter, started as the services are, prints running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def loaded_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds once it has imported ``module``."""
    code = f"import sys, {module}\nprint('\\n'.join(sys.modules))"
    return set(python(code).split())


@pytest.mark.parametrize(("module", "absent"), ENTRY_POINTS)
def test_a_start_does_not_import(module: str, absent: dict[str, str]) -> None:
    loaded = loaded_by(module)
    assert "shared.bus" in loaded or module == "berth_cli.main", "the check sees the imports"
    wrongly = {name: why for name, why in absent.items() if name in loaded}
    assert not wrongly, f"{module} imports at its start: {wrongly}"


def test_nats_aiohttp_and_every_other_import_of_it_are_one_module() -> None:
    """After a service's start, aiohttp's submodule imported first (the package's __init__
    imports it too) loads once: the classes are the same objects, an ``except`` against them
    holds, and nats' binding gives the same classes."""
    code = (
        "import sys, services.preemption.__main__\n"
        "import nats.aio.transport as transport\n"
        "assert 'aiohttp' not in sys.modules\n"
        "from aiohttp.client_exceptions import ClientError\n"
        "import aiohttp\n"
        "assert aiohttp.client_exceptions is sys.modules['aiohttp.client_exceptions']\n"
        "assert ClientError is aiohttp.ClientError\n"
        "assert transport.aiohttp.ClientSession is aiohttp.ClientSession\n"
        "assert transport.aiohttp.WSMsgType is aiohttp.WSMsgType\n"
        "try:\n"
        "    raise transport.aiohttp.ClientConnectionError('x')\n"
        "except ClientError:\n"
        "    print('ok')"
    )
    assert python(code).strip() == "ok"
