"""`berth creds`: the bus's credentials (an nkey seed per user, and the ``auth.conf`` that
NATS includes), made and rotated. Seeds are never printed: only where they are and the
public keys, which are safe to show."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click
from rich.table import Table

from berth_cli.consoles import console_for
from shared.auth import SERVICE_USERS, USERS, CredentialStore

__all__ = ["creds", "reload_nats"]

PID_SUFFIX = ".pid"  # `berth up` writes <node>.pid beside each node's <node>.conf


@click.group()
def creds() -> None:
    """Make and rotate the bus's credentials (nkey seeds and NATS's auth.conf)."""


@creds.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def init(directory: Path) -> None:
    """Make a seed for every bus user (existing ones are kept) and auth.conf in DIRECTORY."""
    store = CredentialStore(directory)
    existed = {user for user in USERS if store.seed_path(user).exists()}
    keys = store.ensure()
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for column in ("FILE", "USER", "PUBLIC KEY"):
        table.add_column(column, no_wrap=True)
    for user in USERS:
        if user not in existed:
            table.add_row(str(store.seed_path(user)), user, keys[user])
    table.add_row(str(store.auth_conf), "(NATS)", "every user's public key and permissions")
    console = console_for()
    console.print(table)
    if existed:
        console.print(f"kept {len(existed)} existing seeds: {', '.join(sorted(existed))}")
    console.print("Seeds are private (0600): give each service and tool only its own.")


@creds.command("rotate")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("user", type=click.Choice(USERS))
def rotate(directory: Path, user: str) -> None:
    """Give USER a new seed and rewrite auth.conf; reloads the NATS servers of a running
    `berth up` that uses DIRECTORY, after which the old seed no longer signs in."""
    store = CredentialStore(directory)
    if not store.auth_conf.exists():
        raise click.ClickException(f"no credentials in {directory}; run `berth creds init`")
    keys = store.rotate(user)
    console = console_for()
    console.print(f"{store.seed_path(user)}: new seed for {user} (public key {keys[user]})")
    console.print(f"{store.auth_conf}: rewritten")
    reloaded = reload_nats(directory)
    if reloaded:
        pids = ", ".join(str(pid) for pid in reloaded)
        console.print(f"NATS reloaded (pid {pids}): the old seed no longer signs in.")
    else:
        console.print(
            "No running NATS of `berth up` uses this directory: reload yours to apply"
            " (kill -HUP <nats-server pid>)."
        )
    if user in (*SERVICE_USERS, "console"):
        # The reload drops the service's connection and refuses its old key; the service
        # reads its seed file again and signs in with the new key (shared/bus/connection.py).
        console.print(
            f"The running {user} signs in anew with the new seed, without a restart, once"
            " NATS has reloaded (it reads its seed file again when its old key is refused)."
        )


def reload_nats(directory: Path) -> list[int]:
    """SIGHUP (reload) every nats-server `berth up` started with this directory's config;
    returns their pids. A pid file whose process is gone or is no such server is skipped."""
    reloaded = []
    for pid_file in sorted(directory.glob(f"*{PID_SUFFIX}")):
        try:
            pid = int(pid_file.read_text().strip())
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        config = str(directory.absolute() / f"{pid_file.stem}.conf").encode()
        if not command or not command[0].endswith(b"nats-server") or config not in command:
            continue  # a stale pid file: the pid now belongs to another process
        os.kill(pid, signal.SIGHUP)
        reloaded.append(pid)
    return reloaded
