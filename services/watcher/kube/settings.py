"""The Kubernetes backend's settings, read from the environment once, by ``run_kubernetes``.

Everything below it gets its part passed in (the managed namespaces, the status writer's
rate limit, the default image), so no module reads the environment on its own and a test
builds the same object from a dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.watcher.kube.creating import DEFAULT_IMAGE, default_image
from services.watcher.kube.kueue_status import StatusSettings
from services.watcher.kube.namespaces import (
    ALL_NAMESPACES,
    MANAGED_NAMESPACES_ENV,
    ManagedNamespaces,
)

__all__ = ["KubeSettings"]


@dataclass(frozen=True)
class KubeSettings:
    """``BERTH_MANAGED_NAMESPACES``, ``BERTH_KUBE_STATUS_QPS``/``_BURST`` and
    ``BERTH_DEFAULT_IMAGE``, parsed; a bad value raises :class:`~.namespaces.SettingError`
    (or ``ValueError``) naming it."""

    namespaces: ManagedNamespaces = ALL_NAMESPACES
    status: StatusSettings = field(default_factory=StatusSettings)
    image: str = DEFAULT_IMAGE

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> KubeSettings:
        return cls(
            namespaces=ManagedNamespaces.parse(environ.get(MANAGED_NAMESPACES_ENV, "")),
            status=StatusSettings.from_environment(environ),
            image=default_image(environ),
        )
