"""CONTRIBUTING.md's newcomer test: each question names one file and the function (or class)
that answers it; this fails when a file is gone or no longer defines that name, so the
answers move with the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "CONTRIBUTING.md"

# A table row: | question | `path` | `name` |
_ROW = re.compile(r"^\| (?P<question>[^|]+\?[^|]*) \| `(?P<path>[^`]+)` \| `(?P<name>\w+)` \|$")


def answers() -> list[tuple[str, str, str]]:
    """(question, file, name) for every row of the newcomer table."""
    return [
        (m["question"], m["path"], m["name"])
        for line in PAGE.read_text().splitlines()
        if (m := _ROW.match(line))
    ]


def defined_names(path: Path) -> set[str]:
    """Every function, method and class a module defines, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def test_ten_questions_or_more() -> None:
    """The table is read (a changed layout would make the checks below vacuous)."""
    assert len(answers()) >= 10


def test_each_answer_is_in_its_file() -> None:
    """Each named file exists and defines the named function or class."""
    wrong = []
    for question, path, name in answers():
        file = REPO / path
        if not file.is_file():
            wrong.append(f"{path}: no such file ({question})")
        elif name not in defined_names(file):
            wrong.append(f"{path} defines no {name} ({question})")
    assert not wrong, wrong


def test_a_wrong_answer_is_caught(tmp_path: Path) -> None:
    """The check itself can fail: a module without the name is not an answer."""
    module = tmp_path / "m.py"
    module.write_text("class Kept:\n    def method(self) -> None: ...\n")
    assert defined_names(module) == {"Kept", "method"}
    assert "assign_flavors" not in defined_names(module)
