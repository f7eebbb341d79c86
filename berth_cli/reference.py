"""docs/cli.md, written from the click command tree: every command and subcommand of `berth`,
its arguments and options, and the exit codes (berth_cli/exit_codes.py).

``python -m berth_cli.reference`` rewrites docs/cli.md and docs/environment.md;
tests/test_reference_docs.py fails when either drifts from the code.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from berth_cli.exit_codes import ExitCode, meaning
from berth_cli.kinds import RESOURCES, WORKLOAD_OBJECT_WORDS
from berth_cli.main import cli

__all__ = ["DOCS", "Entry", "commands", "main", "render"]

DOCS = Path(__file__).resolve().parent.parent / "docs"


@dataclass(frozen=True)
class Entry:
    """One command of the tree: its full name (``berth get workloads``) and its context."""

    path: str
    command: click.Command
    context: click.Context


def commands() -> Iterator[Entry]:
    """Every command, depth first in name order, groups before their subcommands."""

    def walk(command: click.Command, context: click.Context) -> Iterator[Entry]:
        yield Entry(context.command_path, command, context)
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                child = command.get_command(context, name)
                if child is not None and not child.hidden:
                    yield from walk(child, click.Context(child, info_name=name, parent=context))

    yield from walk(cli, click.Context(cli, info_name="berth"))


def _text(help_text: str | None) -> str:
    """A docstring as the page shows it: click's ``\\b`` markers dropped, paragraphs kept,
    each paragraph on one line (the page does not depend on the source's wrapping)."""
    lines = [line for line in inspect.cleandoc(help_text or "").splitlines() if line != "\b"]
    paragraphs = "\n".join(lines).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def _markdown(text: str) -> str:
    """``<`` outside code spans escaped: ``<role>`` would otherwise be taken for HTML."""
    parts = text.split("`")
    parts[::2] = [part.replace("<", "&lt;") for part in parts[::2]]
    return "`".join(parts)


def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped, paragraphs as line breaks."""
    return _markdown(text.replace("|", "\\|")).replace("\n\n", "<br>")


def _value(option: click.Option) -> str:
    """What an option takes: nothing for a flag, the choices, a range, or its type's name."""
    if option.is_flag or option.count:
        return ""
    kind = option.type
    if isinstance(kind, click.Choice):
        return "|".join(str(choice) for choice in kind.choices)
    if isinstance(kind, click.IntRange):
        if kind.max is None:
            return f"INTEGER >= {kind.min}"
        return f"INTEGER {kind.min}..{kind.max}"
    name = option.metavar or kind.name.upper()
    name = f"{name} (repeatable)" if option.multiple else name
    return f"{name}, required" if option.required else name


def _default(option: click.Option) -> str:
    """The default the page states: a ``show_default`` text, else a plain value (a computed
    default, which depends on where the page is written, is described, never evaluated)."""
    if isinstance(option.show_default, str):
        return option.show_default
    default = option.default
    if callable(default):
        return "computed"
    unset = getattr(default, "name", None) == "UNSET"  # click's sentinel for "no default"
    if unset or default is None or default == () or (option.is_flag and default is False):
        return ""
    if option.is_flag and option.secondary_opts:
        return option.opts[0] if default else option.secondary_opts[0]
    return str(default)


def _option_row(option: click.Option) -> str:
    names = " / ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
    help_text = option.help or ""
    envvar = option.envvar if isinstance(option.envvar, str) else None
    if envvar and envvar not in help_text:
        help_text += f" (env {envvar})"
    cells = [names, _value(option), _default(option), help_text]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _usage(entry: Entry) -> str:
    pieces = entry.command.collect_usage_pieces(entry.context)
    return " ".join([entry.path, *pieces])


def _section(entry: Entry) -> list[str]:
    help_text = _markdown(_text(entry.command.help))
    lines = [f"## `{entry.path}`", "", f"`{_usage(entry)}`", "", help_text, ""]
    arguments = [p for p in entry.command.params if isinstance(p, click.Argument)]
    options = [p for p in entry.command.params if isinstance(p, click.Option) and not p.hidden]
    if arguments:
        shown = ", ".join(
            f"`{argument.human_readable_name}`" + ("" if argument.required else " (optional)")
            for argument in arguments
        )
        lines += [f"Arguments: {shown}.", ""]
    if options:
        lines += ["| option | value | default | meaning |", "|---|---|---|---|"]
        lines += [_option_row(option) for option in options]
        lines += ["| `-h` / `--help` |  |  | Show the command's help and exit. |", ""]
    if isinstance(entry.command, click.Group):
        names = entry.command.list_commands(entry.context)
        lines += ["Subcommands: " + ", ".join(f"`{name}`" for name in names) + ".", ""]
    return lines


def _kind_words() -> list[str]:
    rows = ["| kind | words |", "|---|---|"]
    for resource in RESOURCES:
        rows.append(f"| {resource.kind} | " + ", ".join(f"`{w}`" for w in resource.words) + " |")
    return rows


def render() -> str:
    """The whole of docs/cli.md."""
    entries = list(commands())
    lines = [
        "# The `berth` command",
        "",
        "Every command and subcommand with its arguments, options and defaults, generated from",
        "the CLI's click definitions (`berth_cli/`) by `.venv/bin/python -m berth_cli.reference`;",
        "`tests/test_reference_docs.py` fails when this page and the code differ. `berth COMMAND",
        "--help` prints the same, and shell completion knows it:",
        '`eval "$(_BERTH_COMPLETE=bash_source berth)"` (`zsh_source`, `fish_source`).',
        "",
        "Every command other than `up`, `creds`, `schema` and `version` talks to a running Berth:",
        "it finds the bus through `--nats-url` or `BERTH_NATS_URL` and signs in with the seed in",
        "`BERTH_CREDS` (else `$BERTH_DATA_DIR/creds/cli.nk`, else `~/.berth/creds/cli.nk`); see",
        "[environment.md](environment.md).",
        "",
        "## Exit codes",
        "",
        "One set for every command (`berth_cli/exit_codes.py`):",
        "",
        "| code | name | meaning |",
        "|---|---|---|",
        *(f"| {int(code)} | `{code.name}` | {_cell(meaning(code))} |" for code in ExitCode),
        "",
        "## Kinds",
        "",
        "`get`, `describe` and `delete` take a kind by any of its words, in any case",
        "(`berth_cli/kinds.py`); `delete` also takes "
        + ", ".join(f"`{word}`" for word in WORKLOAD_OBJECT_WORDS)
        + " for the workload of that object.",
        "",
        *_kind_words(),
        "",
        "## Commands",
        "",
        *(f"- [`{e.path}`](#{e.path.replace(' ', '-')}): {_summary(e)}" for e in entries[1:]),
        "",
    ]
    for entry in entries:
        lines += _section(entry)
    return "\n".join(lines).rstrip("\n") + "\n"


def _summary(entry: Entry) -> str:
    return _cell(_text(entry.command.help).split("\n\n")[0])


def main() -> None:
    """Write docs/cli.md and docs/environment.md from the code."""
    from berth_cli.environment import render as render_environment

    for name, text in (("cli.md", render()), ("environment.md", render_environment())):
        (DOCS / name).write_text(text)
        print(f"wrote {DOCS / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
