"""bench/watcher_path.py at a tiny scale, as a check of its harness (not a measurement: the
bench is): its stand-in bus must offer every call the watcher makes, or the bench stops on an
AttributeError, and each round must send the same things."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_bench_runs_and_its_rounds_agree() -> None:
    done = subprocess.run(
        [sys.executable, "bench/watcher_path.py", "--workloads", "200", "--rounds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rounds = re.findall(r"\((\d+) events, (\d+) status writes each; digest (\w+)\)", done.stdout)
    assert len(rounds) == 2, done.stdout
    assert rounds[0] == rounds[1], "two rounds of the same inputs sent different things"
    events, writes, _ = rounds[0]
    # No PodsReady: waitForPodsReady is off (services/watcher/pods_ready_gate.py).
    assert (events, writes) == ("3", "2"), "submitted, started, finished; two statuses"
