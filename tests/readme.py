"""The README's walkthroughs as steps a test can run: every ```console block's `$ berth ...`
lines, in order, with the output the README shows under each.

A `## ` section is one walkthrough. `$ berth up` starts a fresh stack (the test starts one
with `start_stack`; the README says so where a walkthrough needs one); `$ export BERTH_...`
is the harness's own business (it runs the CLI with the stack's credentials). Any other
command is refused: the README may not show a step the test does not run.

Outputs are compared line by line as words, in any line order (tables are sorted by name,
and generated names differ per run), after :func:`normalise`: ages and durations (`2s`,
`5 secs ago`) are volatile, and the names `generateName` made are mapped from the README's
to the run's, in the order `submit` printed them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

__all__ = [
    "Step",
    "Walkthrough",
    "created_names",
    "matches",
    "normalise",
    "started_as_shown",
    "walkthroughs",
]


@dataclass
class Step:
    line: str  # as the README shows it, without the `$ `
    args: tuple[str, ...]  # after `berth`
    expected: list[str] = field(default_factory=list)  # the output the README shows

    @property
    def read_only(self) -> bool:
        """A command that only reads (the test may repeat it until the state it shows is
        reached); any other runs exactly once."""
        return self.args[:1] in (("get",), ("describe",), ("status",)) or self.args[:2] in (
            ("jobs", "queue"),
            ("jobs", "logs"),
        )


@dataclass
class Walkthrough:
    section: str
    fresh_stack: bool = False  # the section starts `berth up` again
    steps: list[Step] = field(default_factory=list)
    up_data_dir: str = "~/.berth"  # `berth up --data-dir` as the README gives it
    up_output: list[str] = field(default_factory=list)  # what the README shows it print


def walkthroughs(readme: str) -> list[Walkthrough]:
    """Every section with a console block, in order; a ValueError names a command that is
    neither `berth ...` nor an `export` of a BERTH_ variable."""
    found: list[Walkthrough] = []
    section = ""
    in_console = False
    output: list[str] | None = None  # where the lines under a `$ berth` line go
    for number, line in enumerate(readme.splitlines(), start=1):
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("```"):
            in_console = not in_console and line.strip() == "```console"
            output = None
            continue
        if not in_console:
            continue
        if not line.startswith("$ "):
            if output is not None and line.strip():
                output.append(line)
            continue
        if not found or found[-1].section != section:
            found.append(Walkthrough(section))
        walkthrough = found[-1]
        argv = shlex.split(line[2:], comments=True)
        output = None
        if argv[:2] == ["berth", "up"]:
            walkthrough.fresh_stack = True
            if "--data-dir" in argv[:-1]:
                walkthrough.up_data_dir = argv[argv.index("--data-dir") + 1]
            output = walkthrough.up_output
        elif argv[:1] == ["export"] and all(a.startswith("BERTH_") for a in argv[1:]):
            pass
        elif argv[:1] == ["berth"]:
            walkthrough.steps.append(Step(line[2:], tuple(argv[1:])))
            output = walkthrough.steps[-1].expected
        else:
            raise ValueError(f"README.md:{number}: the walkthrough test cannot run {line!r}")
    return found


_AGO = re.compile(r"\b\d+ (?:secs?|mins?|hrs?|hours?|days?) ago\b")
_DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:ms|s|m|h|d)\b")
_CREATED = re.compile(r"^\S+/(\S+) created$")


def normalise(line: str, names: dict[str, str] | None = None) -> tuple[str, ...]:
    """A line as words, with ages and durations made ``<t>`` and the README's generated
    names replaced by the run's."""
    for readme_name, run_name in (names or {}).items():
        line = re.sub(rf"(?<![\w-]){re.escape(readme_name)}(?![\w-])", run_name, line)
    return tuple(_DURATION.sub("<t>", _AGO.sub("<t>", line)).split())


def created_names(lines: list[str]) -> list[str]:
    """The names `<resource>/<name> created` lines give, in order."""
    return [m.group(1) for line in lines if (m := _CREATED.match(line.strip()))]


def matches(expected: list[str], actual: list[str], names: dict[str, str]) -> bool:
    """The output shows what the README shows, up to line order and volatile words."""
    shown = sorted(normalise(line, names) for line in expected)
    printed = sorted(normalise(line) for line in actual if line.strip())
    return shown == printed


def started_as_shown(walkthrough: Walkthrough, printed: list[str], data_dir: str) -> bool:
    """`berth up` printed what the README shows: the same components, addresses, logs and
    exports, up to the numbers (PIDs, ports, seconds) and the data directory."""

    def words(line: str) -> tuple[str, ...]:
        return tuple(re.sub(r"\d+(?:\.\d+)?", "<n>", line).split())

    shown = [line.replace(walkthrough.up_data_dir, data_dir) for line in walkthrough.up_output]
    return sorted(map(words, shown)) == sorted(words(line) for line in printed if line.strip())
