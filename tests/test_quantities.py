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
