"""Kubernetes resource quantities as exact integers.

Every quantity is held as an ``int`` of *milli-units* ("500m" -> 500, "2" -> 2000,
"1Ki" -> 1_024_000). Admission only ever adds, subtracts and compares these integers, so no
float can decide anything. Parsing goes through ``Decimal`` to keep "1.5Gi" or "1e3" exact;
a value finer than a milli-unit is rounded up, as Kubernetes' ``MilliValue`` does.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Context, Decimal, localcontext

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
    r"(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


# Kubernetes keeps a quantity's milli-value in an int64. Text longer than any such value
# needs, and exponents beyond it, are refused before any arithmetic ("1e999999999" must not
# make Decimal overflow); the arithmetic runs with enough digits to stay exact.
MAX_MILLI = 2**63 - 1
MAX_QUANTITY_TEXT = 64
_MAX_EXPONENT = 40
_EXACT = Context(prec=2 * MAX_QUANTITY_TEXT + _MAX_EXPONENT)


def parse_quantity(value: str | int | float) -> int:
    """Parse a quantity ("500m", "8G", "19531250Ki", "1e3", 4, 0.5) into milli-units.

    A YAML or JSON number is the quantity its text spells, as Kubernetes' Quantity decodes
    it: ``-4`` is refused as negative exactly as ``"-4"`` is, ``2.5`` means ``"2.5"``.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"quantity must be a string or a number, not {_show(value)}")
    if isinstance(value, int):  # exact, and the common case
        if value < 0:
            raise QuantityError(f"quantity {value!r} is negative")
        return _bounded(value * 1000, value)
    text = repr(value) if isinstance(value, float) else value.strip()
    if len(text) > MAX_QUANTITY_TEXT:
        raise QuantityError(f"invalid quantity {_show(value)}: longer than {MAX_QUANTITY_TEXT}")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"invalid quantity {_show(value)}")
    number = Decimal(match["number"])
    if number < 0:
        raise QuantityError(f"quantity {_show(value)} is negative")
    suffix = match["suffix"] or ""
    with localcontext(_EXACT):
        if suffix in _BINARY:
            scaled = number * _BINARY[suffix]
        elif suffix in _DECIMAL:
            scaled = number * _DECIMAL[suffix]
        else:
            exponent = int(suffix[1:])
            if number == 0 or exponent < -_MAX_EXPONENT:
                scaled = number.scaleb(-_MAX_EXPONENT)  # 0, or a sliver that rounds up to 1m
            elif exponent > _MAX_EXPONENT:
                raise QuantityError(f"quantity {_show(value)} is too large")
            else:
                scaled = number.scaleb(exponent)
        milli = int((scaled * 1000).to_integral_value(rounding=ROUND_CEILING))
    return _bounded(milli, value)


def _bounded(milli: int, value: object) -> int:
    if milli > MAX_MILLI:
        raise QuantityError(f"quantity {_show(value)} is too large (at most 2^63-1 milli-units)")
    return milli


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
