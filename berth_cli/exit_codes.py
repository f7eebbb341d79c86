"""The exit codes of `berth`, in one place (docs/cli.md lists them from here).

Click makes two of them itself: a usage error (an unknown option, a missing argument, a
value of the wrong type or out of range) exits 2, and a :class:`click.ClickException`, which
:class:`~berth_cli.client.CliError` is, exits with its ``exit_code``.
"""

from __future__ import annotations

from enum import IntEnum

import click

__all__ = ["ExitCode", "meaning"]


class ExitCode(IntEnum):
    """What a `berth` command's exit status means."""

    OK = 0
    ERROR = click.ClickException.exit_code  # 1: CliError, click's exceptions
    USAGE = click.UsageError.exit_code  # 2


_MEANINGS = {
    ExitCode.OK: (
        "the command did what it was asked; a watch (`get -w`, `events -f`) or `berth up`"
        " ended by Ctrl-C or SIGTERM"
    ),
    ExitCode.ERROR: (
        "a one-line error on stderr (`Error: ...`): bad input (malformed YAML, an unknown"
        " kind, a field naming its problem; nothing is applied), Berth not reachable or"
        " refusing the credentials, an object not found, a refused delete; `berth up` could"
        " not start (port in use, a shared data directory or one another `berth up` holds,"
        " NATS failed); Ctrl-C during any other command, `jobs logs --follow` included"
        " (`Aborted!`)"
    ),
    ExitCode.USAGE: (
        "the command line itself is wrong: an unknown command or option, a missing argument,"
        " a value of the wrong type or outside its range (click's usage error, with the"
        " command's usage line)"
    ),
}


def meaning(code: ExitCode) -> str:
    """The exit code's meaning as docs/cli.md states it."""
    return _MEANINGS[code]
