"""`berth jobs logs`: a job by ID or newest of a name, and a separator line before each run
after the first (berth_cli/jobs.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from berth_cli.client import CliError
from berth_cli.jobs import _pick, _print_new_output
from shared.jobs import ManagedJob


def _job(job_id: int, name: str) -> ManagedJob:
    return ManagedJob(id=job_id, name=name, namespace="default", resources="1x", submitted_at=0)


PICKS: list[tuple[str, int | None, str | None, int | None]] = [
    ("by ID", 1, None, 1),
    ("a name: the newest job of that name", None, "train", 3),
    ("an unknown ID", 9, None, None),
    ("an unknown name", None, "other", None),
]


@pytest.mark.parametrize(("reason", "job_id", "name", "expected"), PICKS, ids=[p[0] for p in PICKS])
def test_pick(reason: str, job_id: int | None, name: str | None, expected: int | None) -> None:
    """Which job `jobs logs ID` / `jobs logs -n NAME` shows (see the id)."""
    found = [_job(1, "train"), _job(2, "eval"), _job(3, "train")]
    if expected is None:
        with pytest.raises(CliError, match="no managed job"):
            _pick(found, job_id, name)
    else:
        assert _pick(found, job_id, name).id == expected, reason


class _Bus:
    """The watcher's logs API, answering from ``files`` per workload name."""

    def __init__(self, files: dict[str, list[dict[str, Any]]]) -> None:
        self.files = files
        self.nc = SimpleNamespace(request=self.request)

    async def request(self, _subject: str, payload: bytes, **_: float) -> Any:
        name = msgspec.json.decode(payload)["name"]
        return SimpleNamespace(data=msgspec.json.encode({"files": self.files.pop(name, [])}))


def test_a_separator_before_each_later_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Pods of one run print together; a new run (or a new attempt) gets a separator line."""
    bus = _Bus(
        {
            "job-1": [
                {"file": "1-main-0.log", "data": "a\n", "offset": 2},
                {"file": "1-main-1.log", "data": "b\n", "offset": 2},
                {"file": "2-main-0.log", "data": "c\n", "offset": 2},
            ],
            "job-1-r1": [{"file": "1-main-0.log", "data": "d\n", "offset": 2}],
        }
    )
    offsets: dict[str, dict[str, int]] = {}
    shown: list[tuple[str, str]] = []

    async def both() -> None:
        for name in ("job-1", "job-1-r1"):
            await _print_new_output(bus, "default", name, offsets, shown)  # type: ignore[arg-type]

    asyncio.run(both())
    assert capsys.readouterr().out.splitlines() == [
        "a",
        "b",
        "--- run 2 of job-1 ---",
        "c",
        "--- run 1 of job-1-r1 ---",
        "d",
    ]
