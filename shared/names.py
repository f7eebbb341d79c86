"""Names as Kubernetes validates them, with errors that name the field and the value.

- object names (``metadata.name``, queue and priority-class names): a DNS-1123 subdomain, at
  most 253 characters of lowercase alphanumerics, ``-`` and ``.``, each dot-separated part
  starting and ending with an alphanumeric (so no ``..``, no ``/``, no unicode);
- namespaces: a DNS-1123 label, at most 63 characters of lowercase alphanumerics and ``-``;
- label values: empty, or at most 63 characters of alphanumerics, ``-``, ``_`` and ``.``,
  starting and ending with an alphanumeric; label keys: an optional DNS-1123 subdomain prefix
  and ``/``, then a name part of the label-value alphabet (not empty);
- uids: 1-128 characters of alphanumerics, ``-``, ``_``, ``.`` and ``:``. Kubernetes makes
  them UUIDs; Berth only needs them to be safe in event ids and message headers.

Every check raises :class:`InvalidName` with one line such as
``metadata.name "/tmp/x" is not a valid name: a lowercase RFC 1123 subdomain must ...``,
never anything else, whatever the value (a number, a 10 MB string, control characters).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache

__all__ = [
    "InvalidName",
    "check_generate_name",
    "check_label_key",
    "check_label_value",
    "check_name",
    "check_namespace",
    "check_uid",
    "name_problem",
    "show",
    "valid_name_and_uid",
]

MAX_SUBDOMAIN = 253
MAX_LABEL = 63
MAX_UID = 128

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_UID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.:]*")

# Kubernetes' own wording (apimachinery's validation messages).
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or"
    " '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
)
LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and"
    " must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')"
)
LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or"
    " '.', and must start and end with an alphanumeric character (e.g. 'MyValue' or 'my_value')"
)
UID_RULE = "a uid must consist of alphanumeric characters, '-', '_', '.' or ':'"


class InvalidName(ValueError):
    """A name Kubernetes would refuse; one line naming the field, the value and the rule."""


def show(value: object, limit: int = 60) -> str:
    """A value quoted on one line, control characters escaped, cut after ``limit`` chars."""
    if not isinstance(value, str):
        text = repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    cut = value if len(value) <= limit else value[: limit - 3] + "..."
    quoted = json.dumps(cut, ensure_ascii=not cut.isprintable())
    return quoted if len(value) <= limit else f"{quoted} ({len(value)} characters)"


def _problem(value: object, pattern: re.Pattern[str], limit: int, rule: str) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > limit:
        return f"must be no more than {limit} characters"
    if not pattern.fullmatch(value):
        return rule
    return None


def _subdomain(value: object) -> str | None:
    if value == "":
        return "must not be empty"
    return _problem(value, _SUBDOMAIN, MAX_SUBDOMAIN, SUBDOMAIN_RULE)


def _label(value: object) -> str | None:
    if value == "":
        return "must not be empty"
    return _problem(value, _LABEL, MAX_LABEL, LABEL_RULE)


def _label_value(value: object) -> str | None:
    return _problem(value, _LABEL_VALUE, MAX_LABEL, LABEL_VALUE_RULE)


def _label_key(value: object) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    prefix, slash, name = value.rpartition("/")
    if slash and (problem := _subdomain(prefix)) is not None:
        return f"prefix part: {problem}"
    if name == "":
        return "name part: must not be empty"
    problem = _label_value(name)
    return None if problem is None else f"name part: {problem}"


def _uid(value: object) -> str | None:
    if value == "":
        return "must not be empty"
    return _problem(value, _UID, MAX_UID, UID_RULE)


def _generate_name(value: object) -> str | None:
    # Kubernetes checks the prefix without its trailing dashes; a suffix is appended to it.
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > MAX_SUBDOMAIN - 5:
        return f"must be no more than {MAX_SUBDOMAIN - 5} characters (a 5-character suffix follows)"
    return _subdomain(value.rstrip("-") or "-")


_RULES: dict[str, tuple[str, Callable[[object], str | None]]] = {
    "name": ("name", _subdomain),
    "namespace": ("namespace", _label),
    "label-value": ("label value", _label_value),
    "label-key": ("label key", _label_key),
    "uid": ("uid", _uid),
    "generate-name": ("name prefix", _generate_name),
}


def name_problem(value: object, rule: str = "name", *, remember: bool = True) -> str | None:
    """Why ``value`` breaks ``rule`` (one of name, namespace, label-value, label-key, uid,
    generate-name), or None when it is valid.

    A string of at most :data:`MEMO_LONGEST` characters is judged once per rule and the
    verdict remembered (:func:`_string_problem`, the last :data:`MEMO_SIZE` of them): the
    watcher judges the same label keys and values, resource names and queue names for every
    workload. Anything else (longer, not exactly a ``str``), or a value the caller knows to
    be new each time (``remember=False``: a workload's own name or uid), is judged every
    time, the memo untouched."""
    if remember and type(value) is str and len(value) <= MEMO_LONGEST:
        return _string_problem(value, rule)
    return _RULES[rule][1](value)


def valid_name_and_uid(name: object, uid: object) -> bool:
    """Whether ``name`` is a valid object name and ``uid`` a valid uid (``name_problem``
    finds nothing in either): one length test and one pattern each, no memo, for what is
    new each time (a workload's own name and uid). False says only "not shown valid here":
    a caller asks :func:`name_problem` for the problem (an exact ``str`` only passes)."""
    return (
        type(name) is str
        and type(uid) is str
        and len(name) <= MAX_SUBDOMAIN
        and len(uid) <= MAX_UID
        and _SUBDOMAIN.fullmatch(name) is not None
        and _UID.fullmatch(uid) is not None
    )


# The longest label key (a subdomain prefix, "/", a name part); longer text is not remembered.
MEMO_LONGEST = MAX_SUBDOMAIN + 1 + MAX_LABEL
MEMO_SIZE = 4096


@lru_cache(maxsize=MEMO_SIZE)
def _string_problem(value: str, rule: str) -> str | None:
    return _RULES[rule][1](value)


def _check(value: object, field: str, rule: str) -> str:
    what, check = _RULES[rule]
    problem = check(value)
    if problem is not None:
        raise InvalidName(f"{field} {show(value)} is not a valid {what}: {problem}")
    assert isinstance(value, str)
    return value


def check_name(value: object, field: str = "metadata.name") -> str:
    """An object name: a DNS-1123 subdomain (253 characters at most)."""
    return _check(value, field, "name")


def check_namespace(value: object, field: str = "metadata.namespace") -> str:
    """A namespace: a DNS-1123 label (63 characters at most)."""
    return _check(value, field, "namespace")


def check_label_value(value: object, field: str) -> str:
    """A label value: empty, or 63 characters at most of [A-Za-z0-9-_.], alphanumeric ends."""
    return _check(value, field, "label-value")


def check_label_key(value: object, field: str) -> str:
    """A label key: an optional DNS-1123 subdomain prefix and ``/``, then a 63-character name."""
    return _check(value, field, "label-key")


def check_uid(value: object, field: str = "metadata.uid") -> str:
    """A uid that is safe in event ids and message headers."""
    return _check(value, field, "uid")


def check_generate_name(value: object, field: str = "metadata.generateName") -> str:
    """A ``generateName`` prefix: a valid name once its suffix is appended."""
    return _check(value, field, "generate-name")
