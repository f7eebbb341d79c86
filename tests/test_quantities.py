"""Kubernetes quantities as exact integers of milli-units."""

import pytest

from shared.quantities import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        (4, 4000),
        ("8G", 8 * 10**12),
        ("19531250Ki", 19531250 * 1024 * 1000),
        ("100Gi", 100 * 2**30 * 1000),
        ("1e3", 1000 * 1000),
        ("1.5", 1500),
        ("1.5Gi", 3 * 2**29 * 1000),
        ("0.1m", 1),  # finer than a milli-unit rounds up, like MilliValue
        ("1E-3", 1),
    ],
)
def test_parse_is_exact(text: str | int, milli: int) -> None:
    """Each accepted spelling parses to the exact integer, never through a float."""
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5 Gi", "1Q", "-1", "Gi", True])
def test_parse_rejects_garbage(text: object) -> None:
    """A malformed or negative quantity is refused with its text in the message."""
    with pytest.raises(QuantityError):
        parse_quantity(text)  # type: ignore[arg-type]


def test_sum_of_decimal_memory_is_the_seeds_binary_total() -> None:
    """Two 10G requests total 19531250Ki, as seed 003's ClusterQueue status shows."""
    total = parse_quantity("10G") * 2
    assert format_quantity(total, binary=True) == "19531250Ki"


@pytest.mark.parametrize(
    ("milli", "binary", "text"),
    [
        (500, False, "500m"),
        (8000, False, "8"),
        (8 * 10**12, False, "8G"),
        (0, False, "0"),
        (2**30 * 1000, True, "1Gi"),
        (1500, True, "1500m"),
        (1000 * 1000, False, "1k"),
    ],
)
def test_format_is_canonical(milli: int, binary: bool, text: str) -> None:
    """Formatting picks the largest exact suffix, as Kubernetes' canonical form does."""
    assert format_quantity(milli, binary=binary) == text
    assert parse_quantity(text) == milli


# --- a YAML number is the quantity its text spells (Kubernetes' Quantity.UnmarshalJSON) -------


@pytest.mark.parametrize(
    ("number", "quoted", "why"),
    [
        (4, "4", "a whole number"),
        (0.5, "0.5", "a fraction, as Kubernetes accepts `cpu: 0.5`"),
        (2.5, "2.5", "a fraction above one"),
        (0, "0", "zero"),
        (1.0e3, "1000", "a float in exponent form"),
    ],
)
def test_a_number_parses_like_its_quoted_form(number: float, quoted: str, why: str) -> None:
    assert parse_quantity(number) == parse_quantity(quoted), why


@pytest.mark.parametrize(
    ("value", "message", "why"),
    [
        (-4, "quantity -4 is negative", "a negative number is refused as its text is"),
        ("-4", "quantity '-4' is negative", "the quoted form"),
        (-0.5, "quantity -0.5 is negative", "a negative fraction"),
        (float("nan"), "invalid quantity nan", "not a number is no quantity"),
        (float("inf"), "invalid quantity inf", "infinity is no quantity"),
        ("1e999999999", "is too large", "a huge exponent is refused before any arithmetic"),
        (10**30, "is too large", "beyond Kubernetes' int64 of milli-units"),
        ("9" * 100, "longer than 64", "absurdly long text"),
        ("\u0663", "invalid quantity", "a non-ASCII digit (Arabic-Indic three)"),
        (None, "must be a string or a number", "no value"),
        ([1], "must be a string or a number", "a list"),
    ],
)
def test_bad_quantities_are_refused_with_a_reason(value: object, message: str, why: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_quantity(value)  # type: ignore[arg-type]


class _Text(str):
    """A str subclass: never parsed from the memo."""


# In order: each is parsed twice, the second time from the memo where it may be used.
REMEMBERED_CASES = [
    # (value, milli or None when refused, why)
    ("1", 1000, "the request every simulated Job has"),
    ("500m", 500, "milli-units"),
    (" 1 ", 1000, "surrounding spaces are stripped, as before"),
    ("1Q", None, "a refused string is refused again: an error is never remembered"),
    ("-1", None, "negative, refused both times"),
    ("1" * 64, None, "64 digits: too large for an int64 of milli-units, refused both times"),
    ("1" * 65, None, "longer than 64 characters: never remembered, refused"),
    (_Text("4Gi"), 4 * 2**30 * 1000, "a str subclass parses without the memo"),
    (2.5, 2500, "a float is parsed from its repr, not remembered"),
]


@pytest.mark.parametrize(("value", "milli", "why"), REMEMBERED_CASES)
def test_remembered_quantities_parse_the_same_every_time(
    value: str | float, milli: int | None, why: str
) -> None:
    """parse_quantity remembers the strings it parsed; the second answer (and the second
    refusal, word for word) must be the first."""
    outcomes: list[object] = []
    for _ in range(2):
        try:
            outcomes.append(parse_quantity(value))
        except QuantityError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1], why
    assert outcomes[0] == milli if milli is not None else isinstance(outcomes[0], str), why
