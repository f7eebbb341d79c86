"""`berth up`'s ports and its table of them. It chooses a service's HTTP port when it spawns
it, and the service binds it a second later: two stacks starting at the same instant can
choose the same free port. The one that loses must move to another port, not crash-loop on
the taken one."""

from __future__ import annotations

import io
import socket
import urllib.request
from pathlib import Path

import pytest
from rich.console import Console

from berth_cli.consoles import console_for
from berth_cli.up import ServiceProcess, Stack


def test_a_service_whose_port_is_taken_before_it_binds_starts_on_another(tmp_path: Path) -> None:
    output = io.StringIO()
    stack = Stack(
        data_dir=tmp_path / "berth",
        nats_port=0,
        console=Console(file=output, width=200),
        with_console=False,
    )
    try:
        stack.start_nats()
        stack.spawn_services()
        recovery = next(s for s in stack.services if s.role == "recovery")
        chosen = recovery.port
        # Taken after `berth up` found it free, before the service (still importing) binds it.
        with socket.socket() as other_stack:
            other_stack.bind(("127.0.0.1", chosen))
            other_stack.listen()
            stack.wait_ready(timeout=60.0)
            assert recovery.port != chosen
            with urllib.request.urlopen(f"{recovery.url}/readyz", timeout=5) as response:
                assert response.status == 200
            assert f"port {chosen} was taken; now on {recovery.port}" in output.getvalue()
            assert recovery.restarts.due_at is None  # moved at once, not a crash with back-off
    finally:
        stack.stop()


def test_the_ready_table_keeps_each_log_path_whole_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`berth up > up.log`: not on a terminal (and no COLUMNS), no column is cut to a
    terminal's width, so each log's path can be copied from the file."""
    monkeypatch.delenv("COLUMNS", raising=False)
    log_path = tmp_path / ("a-long-directory-name-" * 6) / "logs" / "admission.log"
    stack = Stack(data_dir=tmp_path, nats_port=0, console=Console(file=io.StringIO()))
    stack.services.append(ServiceProcess("admission", 0, "admission", 8482, log_path))
    output = io.StringIO()
    stack.print_listening(console_for(output))
    assert str(log_path) in output.getvalue()
