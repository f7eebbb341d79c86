"""Workload log paths (services/watcher/local/processes.py): inside the data dir, or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.watcher.local.processes import workload_log_dir
from services.watcher.logs_api import LogsRequest, read_logs


@pytest.mark.parametrize(
    ("namespace", "name", "ok", "why"),
    [
        ("default", "train", True, "valid names"),
        ("default", "a.b", True, "dots inside a name are fine"),
        ("default", "/tmp/x", False, "an absolute path"),
        ("default", "..", False, "the parent directory"),
        ("..", "x", False, "a namespace that climbs"),
        ("default", "a/../../b", False, "a path that climbs back out"),
        ("default", "", False, "empty"),
        ("default", "x" * 254, False, "too long for a name"),
    ],
)
def test_log_dir(tmp_path: Path, namespace: str, name: str, ok: bool, why: str) -> None:
    root = tmp_path / "logs"
    if ok:
        assert workload_log_dir(root, namespace, name) == root.resolve() / namespace / name, why
        return
    with pytest.raises(OSError, match="no log path"):
        workload_log_dir(root, namespace, name)


def test_a_symlinked_namespace_dir_cannot_lead_outside(tmp_path: Path) -> None:
    """Even valid names: if what they resolve to lies outside the root, no path."""
    root = tmp_path / "logs"
    root.mkdir()
    (root / "team").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(OSError, match="is not inside"):
        workload_log_dir(root, "team", "job")


def test_the_logs_api_refuses_paths(tmp_path: Path) -> None:
    assert read_logs(tmp_path, LogsRequest(namespace="default", name="../etc")) == {
        "error": "invalid namespace or name"
    }
