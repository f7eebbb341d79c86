"""A small error hierarchy for talking to the API server.

kubernetes-asyncio raises ``ApiException`` with an HTTP status, aiohttp raises its own
connection errors and asyncio its timeouts. Business code should only ask "may I retry?",
"is it gone?", "did someone else write first?", so everything is translated here, at the
boundary, with the original chained as ``__cause__``.
"""

from __future__ import annotations

import asyncio

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = [
    "KubeConflict",
    "KubeError",
    "KubeGone",
    "KubeNotFound",
    "KubeRefused",
    "KubeUnavailable",
    "translate",
]


class KubeError(Exception):
    """Any failure of an API call; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeUnavailable(KubeError):
    """Network trouble, timeouts, 429 or 5xx: transient, retry with back-off."""


class KubeNotFound(KubeError):
    """404: the object is gone, or the resource (a CRD) is not installed."""


class KubeConflict(KubeError):
    """409: the object changed since we read it; re-read and decide again."""


class KubeGone(KubeError):
    """410: a watch's resourceVersion is too old; re-list."""


class KubeRefused(KubeError):
    """400, 401, 403, 422...: the server will refuse the same request again."""


_BY_STATUS: dict[int, type[KubeError]] = {404: KubeNotFound, 409: KubeConflict, 410: KubeGone}


def from_status(status: int, message: str) -> KubeError:
    """The error class for an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status](message, status=status)
    if status == 429 or status >= 500 or status == 0:
        return KubeUnavailable(message, status=status)
    return KubeRefused(message, status=status)


def translate(error: BaseException) -> KubeError:
    """Map a third-party exception to our hierarchy (callers ``raise ... from error``)."""
    if isinstance(error, KubeError):
        return error
    if isinstance(error, ApiException):
        status = int(error.status or 0)
        body = error.body if isinstance(error.body, str) else ""
        return from_status(status, f"{status} {error.reason}: {body[:300]}".strip())
    if isinstance(error, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return KubeUnavailable(f"API server unreachable: {error!r}")
    return KubeError(f"unexpected API failure: {error!r}")
