"""Kubernetes resource quantities as exact integers.

Every quantity is held as an ``int`` of *milli-units* ("500m" -> 500, "2" -> 2000,
"1Ki" -> 1_024_000). Admission only ever adds, subtracts and compares these integers, so no
float can decide anything. Parsing goes through ``Decimal`` to keep "1.5Gi" or "1e3" exact;
a value finer than a milli-unit is rounded up, as Kubernetes' ``MilliValue`` does.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = ["QuantityError", "format_quantity", "parse_quantity"]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# Kubernetes' grammar: sign, digits with an optional fraction, then a binary suffix, a decimal
# suffix, or a decimal exponent ("1e3", "1E-2").
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


def parse_quantity(value: str | int) -> int:
    """Parse a quantity ("500m", "8G", "19531250Ki", "1e3", 4) into milli-units."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or an integer, not {value!r}")
    if isinstance(value, int):
        return value * 1000
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or an integer, not {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"invalid quantity {value!r}")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"invalid quantity {value!r}") from error
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        scaled = number * _BINARY[suffix]
    elif suffix in _DECIMAL:
        scaled = number * _DECIMAL[suffix]
    else:
        scaled = number.scaleb(int(suffix[1:]))
    if scaled < 0:
        raise QuantityError(f"quantity {value!r} is negative")
    milli = (scaled * 1000).to_integral_value(rounding=ROUND_CEILING)
    return int(milli)


_DECIMAL_STEPS = (
    ("E", 10**18),
    ("P", 10**15),
    ("T", 10**12),
    ("G", 10**9),
    ("M", 10**6),
    ("k", 10**3),
)
_BINARY_STEPS = tuple(sorted(_BINARY.items(), key=lambda item: -item[1]))


def format_quantity(milli: int, *, binary: bool = False) -> str:
    """Format milli-units canonically: "500m", "8", "8G", "19531250Ki".

    ``binary`` asks for Ki/Mi/Gi... suffixes (memory); it falls back to decimal suffixes when
    the value is not a whole multiple of 1024, as Kubernetes' canonical form does.
    """
    sign = "-" if milli < 0 else ""
    milli = abs(milli)
    if milli % 1000:
        return f"{sign}{milli}m"
    units = milli // 1000
    if units == 0:
        return "0"
    if binary:
        for suffix, size in _BINARY_STEPS:
            if units % size == 0:
                return f"{sign}{units // size}{suffix}"
    for suffix, size in _DECIMAL_STEPS:
        if units % size == 0:
            return f"{sign}{units // size}{suffix}"
    return f"{sign}{units}"


def is_binary_resource(resource: str) -> bool:
    """Whether a resource is conventionally written with binary suffixes (memory, storage)."""
    return resource in {"memory", "ephemeral-storage", "storage"} or resource.startswith(
        "hugepages-"
    )
