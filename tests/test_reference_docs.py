"""docs/cli.md and docs/environment.md are written from the code (berth_cli/reference.py,
berth_cli/environment.py); these tests fail when either page drifts, when the code reads a
`BERTH_*` variable the registry does not list, and when a command's exit code is not the
documented one. Rewrite the pages with `.venv/bin/python -m berth_cli.reference`."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from berth_cli import environment, reference
from berth_cli.exit_codes import ExitCode
from berth_cli.kinds import RESOURCES
from berth_cli.main import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
REWRITE = "run: .venv/bin/python -m berth_cli.reference"


def test_cli_page_is_generated_from_the_code() -> None:
    """docs/cli.md is what the click command tree renders to, byte for byte."""
    assert (DOCS / "cli.md").read_text() == reference.render(), REWRITE


def test_environment_page_is_generated_from_the_registry() -> None:
    """docs/environment.md is what the registry renders to, byte for byte."""
    assert (DOCS / "environment.md").read_text() == environment.render(), REWRITE


def test_every_command_is_walked() -> None:
    """The walk reaches nested subcommands of every group (not only the top level), and no
    command twice."""
    paths = [entry.path for entry in reference.commands()]
    assert len(paths) == len(set(paths))
    for expected in ("berth up", "berth get workloads", "berth jobs launch", "berth creds rotate"):
        assert expected in paths, expected
    kinds = len(RESOURCES) + 1  # `get` has a subcommand per kind, and `pending`
    assert sum(path.startswith("berth get ") for path in paths) == kinds


def test_every_berth_variable_in_the_code_is_in_the_registry() -> None:
    """A `"BERTH_..."` string in services/, shared/, berth_cli/ or berth_console/ is a
    variable the registry (hence the page) lists, or a name listed as not a variable; and
    every listed name is still in the code."""
    in_code = environment.names_in_code()
    listed = {variable.name for variable in environment.VARIABLES}
    missing = sorted(set(in_code) - listed - set(environment.NOT_VARIABLES))
    assert not missing, {name: in_code[name] for name in missing}
    gone = sorted((listed | set(environment.NOT_VARIABLES)) - set(in_code))
    assert not gone, f"listed but no longer in the code: {gone}"


def test_the_scan_finds_variables_read_through_constants_and_settings() -> None:
    """The scan sees names read directly (`os.environ.get("BERTH_DATA_DIR")`), through a
    constant (`MANAGED_NAMESPACES_ENV`), from a settings mapping (`env.get(...)`) and as a
    click `envvar`."""
    in_code = environment.names_in_code()
    assert "shared/service.py" in in_code["BERTH_DATA_DIR"]
    assert "services/watcher/kube/namespaces.py" in in_code["BERTH_MANAGED_NAMESPACES"]
    assert "berth_console/settings.py" in in_code["BERTH_CONSOLE_PORT"]
    assert "berth_cli/main.py" in in_code["BERTH_NATS_URL"]


# (arguments, the exit code, why)
EXIT_CASES: list[tuple[list[str], ExitCode, str]] = [
    (["version"], ExitCode.OK, "a command that did what it was asked"),
    (["--version"], ExitCode.OK, "the eager --version option"),
    (["get", "admissionchecks"], ExitCode.ERROR, "an unknown kind: CliError, one line"),
    (["delete", "nothing", "x"], ExitCode.ERROR, "an unknown kind to delete: CliError"),
    (["no-such-command"], ExitCode.USAGE, "an unknown command"),
    (["apply", "--no-such-option"], ExitCode.USAGE, "an unknown option"),
    (["describe", "workload"], ExitCode.USAGE, "a missing argument"),
    (["up", "--replicas", "10"], ExitCode.USAGE, "a value outside its range (1..9)"),
    (["jobs", "queue", "--limit", "many"], ExitCode.USAGE, "a value of the wrong type"),
]


@pytest.mark.parametrize(("args", "code", "why"), EXIT_CASES, ids=[c[2] for c in EXIT_CASES])
def test_exit_codes_are_the_documented_set(args: list[str], code: ExitCode, why: str) -> None:
    """Each kind of outcome exits with its code from berth_cli/exit_codes.py, as
    docs/cli.md states (none of these cases reaches a bus)."""
    result = CliRunner().invoke(cli, args, prog_name="berth")
    assert result.exit_code == code, (why, result.output)
    if code == ExitCode.USAGE:
        assert "Usage: berth" in result.output, why
    if code == ExitCode.ERROR:
        assert result.output.startswith("Error: "), why


def test_every_exit_code_is_documented() -> None:
    """The page's exit-code table has one row per code of the set."""
    page = (DOCS / "cli.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}` |" in page, code.name


def test_the_docs_index_links_every_page() -> None:
    """docs/README.md links every page of docs/ (a new page must be indexed), and every
    relative link it has resolves to a file."""
    index = DOCS / "README.md"
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", index.read_text())
    pages = {path.name for path in DOCS.glob("*.md")} - {"README.md"}
    assert pages <= set(links), sorted(pages - set(links))
    assert not [link for link in links if not (DOCS / link).exists()]


def _readme_command_cells() -> list[str]:
    """The `berth ...` code spans of the first column of the README's command table."""
    text = (DOCS.parent / "README.md").read_text()
    table = text.split("## Commands", 1)[1].split("\n\n", 2)[1]
    cells = [line.split(" | ", 1)[0] for line in table.splitlines() if line.startswith("| `")]
    return [span for cell in cells for span in re.findall(r"`(berth [^`]+)`", cell)]


def _resolve(words: list[str]) -> list[click.Command]:
    """The chain of commands a span names (`get workloads\\|cq` takes the first word)."""
    chain: list[click.Command] = [cli]
    context = click.Context(cli, info_name="berth")
    for word in words:
        command = chain[-1]
        if not isinstance(command, click.Group):
            break
        child = command.get_command(context, word.split("|")[0].replace("\\", ""))
        if child is None:
            break
        chain.append(child)
        context = click.Context(child, info_name=word, parent=context)
    return chain


def test_readme_command_table_names_real_commands_and_options() -> None:
    """Every command the README's table shows exists, every option it shows is one of that
    command's (or its parents'), and every top-level command has a row."""
    spans = _readme_command_cells()
    assert len(spans) >= 15
    shown_top = set()
    for span in spans:
        words = span.split()[1:]
        chain = _resolve(words)
        names = {opt for c in chain for p in c.params for opt in [*p.opts, *p.secondary_opts]}
        names |= {"-h", "--help"}
        if len(chain) > 1:
            shown_top.add(chain[1].name)
        options = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", span.replace("\\|", " "))
        unknown = [option for option in options if option not in names]
        assert not unknown, (span, unknown)
        assert len(chain) > 1 or options == ["--version"], span
    context = click.Context(cli, info_name="berth")
    assert set(cli.list_commands(context)) <= shown_top, set(cli.list_commands(context)) - shown_top


def test_every_relative_link_resolves() -> None:
    """A relative link in any page of the documentation (README, CONTRIBUTING, CHANGELOG,
    docs/, examples/, deploy/) points at a file or folder that exists."""
    root = DOCS.parent
    pages = [root / "README.md", root / "CONTRIBUTING.md", root / "CHANGELOG.md"]
    pages += [
        *DOCS.glob("*.md"),
        *(root / "examples").glob("*.md"),
        *(root / "deploy").glob("*.md"),
    ]
    broken = [
        f"{page.relative_to(root)}: {link}"
        for page in pages
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text())
        if not (page.parent / link).exists()
    ]
    assert len(pages) > 15 and not broken, broken
