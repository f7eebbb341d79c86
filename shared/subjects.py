"""NATS subject patterns matched on the client: ``*`` is one token, ``>`` one or more."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = ["covers", "server_filters", "subject_family", "subject_matcher"]


def subject_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate true for the subjects any of ``patterns`` matches, as nats-server would.

    One compiled regular expression: it runs for every message a consumer receives, and
    token-by-token matching in Python was 7% of admission's CPU on the Kueue benchmark.
    """
    alternatives = "|".join(_regex(pattern) for pattern in patterns)
    match = re.compile(f"(?:{alternatives})").fullmatch
    return lambda subject: match(subject) is not None


def _regex(pattern: str) -> str:
    tokens = []
    for token in pattern.split("."):
        if token == "*":
            tokens.append(r"[^.]+")
        elif token == ">":
            tokens.append(r".+")
        else:
            tokens.append(re.escape(token))
    return r"\.".join(tokens)


def subject_family(subject: str) -> str:
    """A subject without its names: ``berth.cq.<queue>.admitted.<ns>.<name>`` is
    ``cq.*.admitted``, ``berth.wl.started.<ns>.<name>`` is ``wl.started``, any check's
    answer ``check.*``, any lease marker ``lease.*``. What reads and publications are counted
    by (the bus's read counts, the Kueue benchmark's table of subjects)."""
    parts = subject.split(".", 4)
    if len(parts) < 3:
        return subject
    family = parts[1]
    if family == "cq":
        return f"cq.*.{parts[3]}" if len(parts) > 3 else "cq.*"
    if family in ("check", "lease"):
        return f"{family}.*"
    return f"{family}.{parts[2]}"


def covers(wide: str, narrow: str) -> bool:
    """Whether pattern ``wide`` matches every subject pattern ``narrow`` matches
    (``berth.>`` covers ``berth.lease.>``; ``berth.cq.*.admitted.>`` covers
    ``berth.cq.a.admitted.>``, not the reverse)."""
    wide_tokens, narrow_tokens = wide.split("."), narrow.split(".")
    for index, token in enumerate(wide_tokens):
        if token == ">":
            return len(narrow_tokens) > index
        if index >= len(narrow_tokens):
            return False
        other = narrow_tokens[index]
        if other == ">" or (token != "*" and token != other):
            return False
    return len(wide_tokens) == len(narrow_tokens)


def server_filters(patterns: Sequence[str]) -> list[str]:
    """``patterns`` as a consumer's ``filter_subjects``: nats-server refuses filters that
    overlap, so a pattern another one covers is left out (and duplicates), order kept."""
    kept: list[str] = []
    for pattern in patterns:
        if pattern in kept:
            continue
        if any(covers(other, pattern) for other in patterns if other != pattern):
            continue
        kept.append(pattern)
    return kept
