"""The one way Berth reads YAML a user gives it: bounded in size, depth and alias expansion.

YAML anchors and aliases let a 1 KB file stand for billions of nodes ("billion laughs"):
PyYAML shares the aliased nodes, so loading is cheap, but everything that walks the result
(a JSON encode, a deep copy, a validator) pays for the expansion; ``berth submit`` once grew
to 3.4 GB on such a file. So every file or stream is refused, with one line naming it, when

- it is larger than :data:`MAX_BYTES` (1 MiB, Kubernetes' own limit for an object is 1.5 MiB
  and a workload or queue is a few KB), or is not UTF-8 text;
- its nodes nest deeper than :data:`MAX_DEPTH` levels, aliases expanded (a pathological
  nesting would otherwise overflow the parser's stack);
- its aliases expand it beyond :data:`MAX_EXPANDED` (4 MiB counted as one unit per node plus
  one per scalar character: four times what a file without aliases can reach), or an alias
  refers to the node that contains it.

The documents come back as plain Python values (mappings, lists, scalars). Callers turn
:class:`YamlInputError` into their own error type.
"""

from __future__ import annotations

import sys
from typing import Any, BinaryIO

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_EXPANDED",
    "YamlInputError",
    "load_all",
    "read_input",
]

MAX_BYTES = 1 << 20
MAX_DEPTH = 100
MAX_EXPANDED = 4 * MAX_BYTES


class YamlInputError(ValueError):
    """YAML input Berth refuses; one line naming the source and the problem."""


def read_input(path: str, *, stdin: BinaryIO | None = None) -> tuple[str, str]:
    """Read a file (or ``-``: standard input) as text, at most :data:`MAX_BYTES`; returns the
    text and the name to use in messages."""
    source = "stdin" if path == "-" else path
    try:
        if path == "-":
            data = (stdin or sys.stdin.buffer).read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise YamlInputError(f"cannot read {path}: {error.strerror or error}") from error
    if len(data) > MAX_BYTES:
        raise YamlInputError(f"{source}: larger than 1 MiB, the limit for one file")
    try:
        return data.decode("utf-8"), source
    except UnicodeDecodeError as error:
        raise YamlInputError(
            f"{source}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from error


def load_all(text: str, *, source: str) -> list[Any]:
    """Every document of ``text`` (None for an empty one), within the bounds above."""
    if len(text.encode("utf-8", errors="surrogatepass")) > MAX_BYTES:
        raise YamlInputError(f"{source}: larger than 1 MiB, the limit for one file")
    documents: list[Any] = []
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # refuses control characters already
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # pragma: no cover - check_node said there is one
                break
            _check_expansion(node, source)
            documents.append(loader.construct_document(node))
    except YamlInputError:
        raise
    except yaml.YAMLError as error:
        raise YamlInputError(_describe(error, source)) from None
    except _TooDeep:
        raise YamlInputError(
            f"{source}: nested deeper than {MAX_DEPTH} levels, the limit for YAML input"
        ) from None
    except (ValueError, TypeError, OverflowError) as error:
        # PyYAML lets some bad scalars through as bare errors (`2024-13-45` as a date).
        raise YamlInputError(f"{source}: invalid YAML value: {error}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


class _TooDeep(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with a bound on how deep the composer recurses."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Every key a string, as kubectl's YAML-to-JSON makes it: YAML 1.1 reads ``on:``,
        ``yes:`` or ``1:`` as a bool or a number, and JSON (the bus, the config bucket) has
        string keys only, so ``true``, ``false``, ``null`` and the number's text."""
        mapping = super().construct_mapping(node, deep=deep)
        if all(type(key) is str for key in mapping):
            return mapping
        return {_key_text(key): value for key, value in mapping.items()}

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _key_text(key: Any) -> Any:
    """A mapping key as JSON spells it (a bool as ``true``, None as ``null``); a string as
    it is."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return key if isinstance(key, str) else str(key)


def _check_expansion(root: Node, source: str) -> None:
    """Refuse a document whose aliases expand it too far (or into itself)."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    visiting: set[int] = set()

    def measure(node: Node, depth: int) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is None:
            if id(node) in visiting:
                raise YamlInputError(f"{source}: an alias refers to the node that contains it")
            if depth > MAX_DEPTH:
                raise _TooDeep
            visiting.add(id(node))
            known = _measured(node, depth, measure)
            visiting.discard(id(node))
            sizes[id(node)] = known
        if depth + known[1] > MAX_DEPTH:
            raise _TooDeep
        return known

    try:
        size, _ = measure(root, 1)
    except _TooDeep:
        raise YamlInputError(
            f"{source}: nested deeper than {MAX_DEPTH} levels once its aliases are expanded,"
            " the limit for YAML input"
        ) from None
    if size > MAX_EXPANDED:
        raise YamlInputError(
            f"{source}: its aliases expand it beyond 4 MiB, the limit for YAML input"
            ' (anchors and aliases that multiply, as in a "billion laughs" file)'
        )


def _measured(node: Node, depth: int, measure: Any) -> tuple[int, int]:
    if isinstance(node, ScalarNode):
        return 1 + len(str(node.value)), 0
    children: list[Node] = []
    if isinstance(node, SequenceNode):
        children = list(node.value)
    elif isinstance(node, MappingNode):
        children = [part for pair in node.value for part in pair]
    size, height = 1, 0
    for child in children:
        child_size, child_height = measure(child, depth + 1)
        size += child_size
        height = max(height, child_height + 1)
        if size > MAX_EXPANDED:
            break  # refused anyway; stop before the numbers grow astronomically
    return size, height


def _describe(error: yaml.YAMLError, source: str) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{source}: malformed YAML{at}: {problem}"
