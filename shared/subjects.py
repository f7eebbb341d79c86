"""NATS subject patterns matched on the client: ``*`` is one token, ``>`` one or more."""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["subject_matcher"]


def subject_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate true for the subjects any of ``patterns`` matches, as nats-server would."""
    split = [tuple(pattern.split(".")) for pattern in patterns]

    def matches(subject: str) -> bool:
        tokens = subject.split(".")
        return any(_match(pattern, tokens) for pattern in split)

    return matches


def _match(pattern: tuple[str, ...], tokens: list[str]) -> bool:
    for index, wanted in enumerate(pattern):
        if wanted == ">":
            return len(tokens) > index
        if index >= len(tokens) or (wanted != "*" and wanted != tokens[index]):
            return False
    return len(tokens) == len(pattern)
