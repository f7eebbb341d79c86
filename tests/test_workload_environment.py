"""What a locally run workload inherits from the watcher."""

from __future__ import annotations

import os

import pytest

from services.watcher.local.processes import workload_environment

# (watcher's environment, container env, expected subset, absent, why)
CASES = [
    (
        {"BERTH_CREDS": "/d/creds/watcher.nk", "HOME": "/root"},
        {},
        {"HOME": "/root"},
        {"BERTH_CREDS"},
        "the watcher's seed never reaches a workload",
    ),
    (
        {"BERTH_NATS_URL": "nats://x", "BERTH_DATA_DIR": "/d"},
        {},
        {},
        {"BERTH_NATS_URL", "BERTH_DATA_DIR"},
        "nor any other Berth setting",
    ),
    (
        {"BERTH_CREDS": "/d/creds/watcher.nk"},
        {"BERTH_CREDS": "mine"},
        {"BERTH_CREDS": "mine"},
        set(),
        "a container's own env is the user's choice",
    ),
    (
        {"LANG": "C.UTF-8"},
        {"LANG": "en_GB.UTF-8"},
        {"LANG": "en_GB.UTF-8"},
        set(),
        "the container's env wins over the machine's",
    ),
]


@pytest.mark.parametrize(
    ("machine", "own", "present", "absent", "why"), CASES, ids=[c[4] for c in CASES]
)
def test_workload_environment(
    monkeypatch: pytest.MonkeyPatch,
    machine: dict[str, str],
    own: dict[str, str],
    present: dict[str, str],
    absent: set[str],
    why: str,
) -> None:
    """A workload gets the machine's environment less Berth's settings, plus its own."""
    for key in [k for k in os.environ if k.startswith("BERTH_")]:
        monkeypatch.delenv(key)
    for key, value in machine.items():
        monkeypatch.setenv(key, value)
    environment = workload_environment(own)
    for key, value in present.items():
        assert environment.get(key) == value, why
    assert not absent & environment.keys(), why
    assert "PATH" in environment
