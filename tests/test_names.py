"""Names as Kubernetes validates them (shared.names): one line naming field, value and rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.names import (
    InvalidName,
    check_generate_name,
    check_label_key,
    check_label_value,
    check_name,
    check_namespace,
    check_uid,
    name_problem,
)

NAME_CASES = [
    # (value, valid, why)
    ("train-1", True, "lowercase alphanumerics and '-'"),
    ("a.b.c", True, "dots separate DNS parts"),
    ("a" * 253, True, "253 characters is the limit"),
    ("a" * 254, False, "254 characters is one too many"),
    ("/tmp/x", False, "a path: '/' is not allowed"),
    ("..", False, "'..' has empty parts"),
    ("a..b", False, "an empty part between dots"),
    ("../etc", False, "a relative path"),
    ("Train", False, "uppercase"),
    ("-a", False, "must start with an alphanumeric"),
    ("a-", False, "must end with an alphanumeric"),
    ("café", False, "unicode"),
    ("a b", False, "a space"),
    ("a\nb", False, "a newline"),
    ("", False, "empty"),
]


@pytest.mark.parametrize(("value", "valid", "why"), NAME_CASES)
def test_object_names(value: str, valid: bool, why: str) -> None:
    assert (name_problem(value, "name") is None) is valid, why


@pytest.mark.parametrize(
    ("value", "valid", "why"),
    [
        ("team-a", True, "a DNS-1123 label"),
        ("a" * 63, True, "63 characters is the limit"),
        ("a" * 64, False, "64 characters is one too many"),
        ("team.a", False, "no dots in a label"),
        ("Team", False, "uppercase"),
        ("", False, "empty"),
    ],
)
def test_namespaces(value: str, valid: bool, why: str) -> None:
    assert (name_problem(value, "namespace") is None) is valid, why


@pytest.mark.parametrize(
    ("rule", "value", "valid", "why"),
    [
        ("label-value", "", True, "an empty label value is valid"),
        ("label-value", "My_Value.1", True, "uppercase, '_' and '.' are allowed in values"),
        ("label-value", "a" * 64, False, "63 characters at most"),
        ("label-value", "_a", False, "must start with an alphanumeric"),
        ("label-key", "kueue.x-k8s.io/queue-name", True, "a prefixed key"),
        ("label-key", "app", True, "an unprefixed key"),
        ("label-key", "Bad Prefix/x", False, "the prefix must be a DNS subdomain"),
        ("label-key", "x/", False, "the name part must not be empty"),
        ("uid", "0b6f2c0e-1c55-4c3e-9a0d-7f1e1f4b0e2a", True, "a UUID"),
        ("uid", "u1", True, "a short test uid"),
        ("uid", "a\r\nNats-Msg-Id: x", False, "a header injection"),
        ("uid", "", False, "empty"),
        ("generate-name", "train-", True, "a prefix ending in '-'"),
        ("generate-name", "Train-", False, "uppercase"),
    ],
)
def test_other_rules(rule: str, value: str, valid: bool, why: str) -> None:
    assert (name_problem(value, rule) is None) is valid, why


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (
            check_name,
            "/tmp/x",
            'metadata.name "/tmp/x" is not a valid name: a lowercase RFC 1123 subdomain',
        ),
        (check_name, "a" * 300, r'"a{57}\.\.\." \(300 characters\) is not a valid name: must be no more than 253'),
        (check_name, 42, "metadata.name 42 is not a valid name: must be a string"),
        (check_name, "café", 'metadata.name "café" is not a valid name'),
        (check_name, "a\nb", r'metadata.name "a\\nb" is not a valid name'),
        (check_namespace, "Team A", 'metadata.namespace "Team A" is not a valid namespace'),
        (check_uid, "", 'metadata.uid "" is not a valid uid: must not be empty'),
        (check_generate_name, "A-", 'metadata.generateName "A-" is not a valid name prefix'),
    ],
)
def test_errors_name_the_field_the_value_and_the_rule(
    check: object, value: object, message: str
) -> None:
    with pytest.raises(InvalidName, match=message) as raised:
        check(value)  # type: ignore[operator]
    assert "\n" not in str(raised.value)


def test_label_errors_name_their_field() -> None:
    with pytest.raises(InvalidName, match=r'^labels\.team "a b" is not a valid label value'):
        check_label_value("a b", "labels.team")
    with pytest.raises(InvalidName, match=r"^labels \"A/b\" is not a valid label key: prefix part: a lowercase"):
        check_label_key("A/b", "labels")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.integers(), st.none(), st.binary(max_size=10)))
def test_any_value_gives_a_verdict_never_a_crash(value: object) -> None:
    """Whatever the value, each rule answers None or a reason; a check raises only
    InvalidName, in one line."""
    for rule in ("name", "namespace", "label-value", "label-key", "uid", "generate-name"):
        problem = name_problem(value, rule)
        assert problem is None or isinstance(problem, str)
    try:
        check_name(value)
    except InvalidName as error:
        assert "\n" not in str(error)
