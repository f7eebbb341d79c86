"""The CLI's tables off a terminal (berth_cli/consoles.py): piped or written to a file, no
cell is cut to a terminal's 80 columns, since what they show is copied from there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared.auth import USERS


def test_creds_init_piped_names_every_seed_whole(tmp_path: Path) -> None:
    """`berth creds init DIR | cat`: each seed's path and user in full (they were cut to a
    few letters)."""
    directory = tmp_path / ("a-directory-with-a-long-name-" * 3) / "creds"
    environ = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    printed = subprocess.run(
        [sys.executable, "-m", "berth_cli", "creds", "init", str(directory)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=True,
    ).stdout
    for user in USERS:
        assert f"{directory / user}.nk  " in printed, user
