"""What every configuration object is made of: its metadata, the strict base of every spec,
the quantity type, and the error every refused object raises (see :mod:`shared.config`)."""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["ConfigError", "Int32", "ObjectMeta", "Quantity", "Spec"]

# An int32 field of a Kubernetes API (a priority's value): a value past it is refused as the
# API server refuses it, not stored and shown.
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class ConfigError(ValueError):
    """An object that Berth cannot accept; the message names the document and the field."""


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    generation: int = 0


class Spec(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    """Base of every spec: strict, so that a misspelt field is refused rather than ignored."""


# A YAML number is a quantity like its quoted form (parse_quantity): 4, 0.5, "500m".
Quantity = str | int | float
