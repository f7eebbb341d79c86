"""Kubernetes resource quantities as exact integers.

Every quantity is held as an ``int`` of *milli-units* ("500m" -> 500, "2" -> 2000,
"1Ki" -> 1_024_000). Admission only ever adds, subtracts and compares these integers, so no
float can decide anything. Parsing is integer arithmetic, so "1.5Gi" or "1e3" stay exact;
a value finer than a milli-unit is rounded up, as Kubernetes' ``MilliValue`` does.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["QuantityError", "format_quantity", "parse_quantity"]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
# decimal suffix -> power of ten
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Kubernetes' grammar: sign, digits with an optional fraction, then a binary suffix, a decimal
# suffix, or a decimal exponent ("1e3", "1E-2").
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<digits>[0-9]+\.?[0-9]*|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


# Kubernetes keeps a quantity's milli-value in an int64. Text longer than any such value
# needs, and exponents beyond it, are refused before any arithmetic ("1e999999999" must not
# make a billion-digit integer).
MAX_MILLI = 2**63 - 1
MAX_QUANTITY_TEXT = 64
_MAX_EXPONENT = 40


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
    if type(value) is str and len(value) <= MAX_QUANTITY_TEXT:
        return _parse_text(value)
    return _parse(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> int:
    """A quantity string parsed once, the result remembered (the last 4,096 strings): every
    workload of a batch spells its requests alike ("1", "500m", "4Gi"). A refused string is
    not remembered (an exception is never cached): it is refused again, with the same error."""
    return _parse(value)


def _parse(value: str | float) -> int:
    text = repr(value) if isinstance(value, float) else value.strip()
    if len(text) > MAX_QUANTITY_TEXT:
        raise QuantityError(f"invalid quantity {_show(value)}: longer than {MAX_QUANTITY_TEXT}")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"invalid quantity {_show(value)}")
    sign: str = match["sign"]
    whole, _, fraction = str(match["digits"]).partition(".")
    mantissa = int(whole + fraction or "0")  # the number is mantissa * 10^-len(fraction)
    if sign == "-" and mantissa:
        raise QuantityError(f"quantity {_show(value)} is negative")
    suffix = match["suffix"] or ""
    factor, exponent = 1, 3 - len(fraction)  # milli-units = mantissa * factor * 10^exponent
    if suffix in _BINARY:
        factor = _BINARY[suffix]
    elif suffix in _DECIMAL:
        exponent += _DECIMAL[suffix]
    elif mantissa:
        given = int(suffix[1:])
        if given > _MAX_EXPONENT:
            raise QuantityError(f"quantity {_show(value)} is too large")
        exponent += max(given, -_MAX_EXPONENT)  # below that, a sliver: it rounds up to 1m
    scaled = mantissa * factor
    # Exact integers throughout; a value finer than a milli-unit rounds up (MilliValue).
    milli = scaled * 10**exponent if exponent >= 0 else -(-scaled // 10**-exponent)
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
