"""docs/events.md's "Following events from Python" runs as it is printed: signed in as the
read-only `reader` user, it prints the admission of a Job submitted while it follows. Its
code is read from the page, so the page cannot drift from what works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from tests.conftest import FIXTURES, REPO, Stack, berth
from tests.e2e import eventually, job_manifest, submit_manifest

SECTION = "## Following events from Python"


def example() -> str:
    """The first Python block of the section."""
    page = (REPO / "docs" / "events.md").read_text()
    section = page[page.index(SECTION) :]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the section has no Python block"
    return found.group(1)


def test_the_documented_follower_prints_an_admission(stack: Stack, tmp_path: Path) -> None:
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=stack.url)
    reader = stack.data_dir / "creds" / "reader.nk"
    follower = subprocess.Popen(
        [sys.executable, "-c", example()],
        env={**os.environ, "BERTH_NATS_URL": stack.url, "BERTH_CREDS": str(reader)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert follower.stdout is not None and follower.stderr is not None
    reading = threading.Thread(target=lines.extend, args=(follower.stdout,), daemon=True)
    reading.start()
    try:
        submit_manifest(stack.url, tmp_path, job_manifest("followed", cpu=1))
        eventually(
            lambda: any(
                line.startswith("berth.cq.cluster-queue.admitted.default.followed ")
                for line in lines
            ),
            timeout=30,
        )
    finally:
        follower.kill()
        follower.wait(10)
        reading.join(10)
    stderr = follower.stderr.read()
    assert "Error" not in stderr, stderr
