"""Names as Kubernetes validates them (shared.names): one line naming field, value and rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.names import (
    MEMO_SIZE,
    InvalidName,
    _string_problem,
    check_generate_name,
    check_label_key,
    check_label_value,
    check_name,
    check_namespace,
    check_uid,
    name_problem,
    valid_name_and_uid,
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
        (
            check_name,
            "a" * 300,
            r'"a{57}\.\.\." \(300 characters\) is not a valid name: must be no more than 253',
        ),
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
    with pytest.raises(
        InvalidName, match=r"^labels \"A/b\" is not a valid label key: prefix part: a lowercase"
    ):
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


class _Text(str):
    """A str subclass: its equality could be anything, so its verdict is never remembered."""


CHECKS: dict[str, Callable[[object], str]] = {
    "name": check_name,
    "namespace": check_namespace,
    "label-value": lambda value: check_label_value(value, "v"),
    "label-key": lambda value: check_label_key(value, "k"),
    "uid": check_uid,
    "generate-name": check_generate_name,
}

# In order: each verdict is asked twice, the second from the memo where it may be used.
REMEMBERED_CASES = [
    # (rule, value, valid, why)
    ("label-key", "kueue.x-k8s.io/queue-name", True, "the label every workload has"),
    ("label-value", "Train", True, "uppercase is fine in a label value"),
    ("name", "Train", False, "the same string under another rule: the rule is in the key"),
    ("namespace", "Train", False, "and under a third rule"),
    ("name", "a..b", False, "a refused name is refused again, not remembered as valid"),
    ("label-value", "team-a ", False, "a changed input (a trailing space) is judged anew"),
    ("label-value", "team-a", True, "the same value without it"),
    ("label-value", _Text("team a"), False, "a str subclass: judged every time"),
    ("label-value", "a" * 400, False, "longer than MEMO_LONGEST: judged every time"),
    ("label-key", "a" * 250 + "/" + "b" * 60, True, "the longest keys are remembered"),
    ("label-key", "a" * 254 + "/b", False, "a prefix one too long: refused, and again"),
]


@pytest.mark.parametrize(("rule", "value", "valid", "why"), REMEMBERED_CASES)
def test_remembered_verdicts_match_a_fresh_check(
    rule: str, value: str, valid: bool, why: str
) -> None:
    """name_problem remembers verdicts on strings; each must equal the check that never
    remembers (check_*), the first time and every time after."""
    fresh: str | None = None
    try:
        CHECKS[rule](value)
    except InvalidName as error:
        fresh = str(error)
    for _ in range(2):
        problem = name_problem(value, rule)
        assert (problem is None) is valid, why
        assert (fresh is None) is valid, why
        if problem is not None:
            assert fresh is not None and fresh.endswith(problem), why


@pytest.mark.parametrize(("rule", "value", "valid", "why"), REMEMBERED_CASES)
def test_a_verdict_not_remembered_is_the_same(rule: str, value: str, valid: bool, why: str) -> None:
    """``remember=False`` (a value new each time): the same verdict, word for word, and the
    memo neither asked nor grown."""
    before = _string_problem.cache_info()
    problem = name_problem(value, rule, remember=False)
    assert _string_problem.cache_info() == before, why
    assert problem == name_problem(value, rule), why
    assert (problem is None) is valid, why


def test_the_memo_is_bounded() -> None:
    """Distinct names by the thousands (every workload's own) never grow it past its size."""
    for index in range(MEMO_SIZE + 100):
        assert name_problem(f"job-{index}") is None
    assert name_problem("job-") is not None  # still judged: ends with '-'
    assert _string_problem.cache_info().currsize <= MEMO_SIZE


# (name, uid, shown valid at once, why): valid_name_and_uid says True only where name_problem
# finds nothing in either; False sends the caller to name_problem.
AT_ONCE_CASES: list[tuple[object, object, bool, str]] = [
    ("job-1", "uid-1", True, "a plain name and uid"),
    ("a.b.c", "0b6f2c0e-1c55-4c3e-9a0d-7f1e1f4b0e2a", True, "dotted name, a UUID"),
    ("a" * 253, "u" * 128, True, "both at their limit"),
    ("a" * 254, "u", False, "a name one too long"),
    ("job", "u" * 129, False, "a uid one too long"),
    ("", "u", False, "an empty name"),
    ("job", "", False, "an empty uid"),
    ("Job", "u", False, "an uppercase name"),
    ("a..b", "u", False, "an empty DNS part"),
    ("job", "a\r\nNats-Msg-Id: x", False, "a header injection in the uid"),
    ("job", ":u", False, "a uid starting with ':'"),
    ("café", "u", False, "unicode"),
    (42, "u", False, "not a string"),
    ("job", None, False, "no uid at all"),
    (_Text("job"), "u", False, "a str subclass: never shown valid here (name_problem judges it)"),
    ("job", _Text("u"), False, "a str subclass uid, the same"),
]


@pytest.mark.parametrize(
    ("name", "uid", "at_once", "why"), AT_ONCE_CASES, ids=[c[3] for c in AT_ONCE_CASES]
)
def test_valid_name_and_uid_says_valid_only_when_name_problem_does(
    name: object, uid: object, at_once: bool, why: str
) -> None:
    assert valid_name_and_uid(name, uid) is at_once, why
    judged = name_problem(name, "name") is None and name_problem(uid, "uid") is None
    assert judged or not at_once, why
    if type(name) is str and type(uid) is str:  # (a subclass: the one case they differ)
        assert at_once is judged, why


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=260), st.text(max_size=130))
def test_valid_name_and_uid_never_passes_what_name_problem_refuses(name: str, uid: str) -> None:
    judged = name_problem(name, "name") is None and name_problem(uid, "uid") is None
    assert valid_name_and_uid(name, uid) is judged
