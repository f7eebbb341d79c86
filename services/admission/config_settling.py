"""When admission takes a config change: once the burst it belongs to is in.

A whole configuration is written one key at a time (`berth apply` of a file, the Kubernetes
backend mirroring every queue at start, Kueue's large-scale benchmark: a thousand
ClusterQueues, Namespaces and LocalQueues). The scheduler takes a change by rebuilding its
whole topology and placing every pending workload again; with workload events arriving
meanwhile, a pass ran every few keys and each rebuilt: quadratic in the size of the config.

The config watch says how many changes the server still had for it when it sent the last one
(``ConfigMirror.behind``): each of those comes after it. While that is not 0, the change is
not taken and nothing is decided (that would be deciding on a config known to be stale); the
events still fold. Once the last of the burst has arrived, the next pass rebuilds once. A
watch that stays behind (a consumer re-created mid-burst) holds decisions back for at most
:data:`SETTLE_LIMIT_S`.
"""

from __future__ import annotations

from shared.config_mirror import ConfigMirror

__all__ = ["SETTLE_LIMIT_S", "ConfigSettling"]

SETTLE_LIMIT_S = 1.0


class ConfigSettling:
    """Whether a pass may run now, given the config watch (see the module docstring)."""

    def __init__(self, config: ConfigMirror, limit_s: float = SETTLE_LIMIT_S) -> None:
        self.config = config
        self.limit_s = limit_s
        self._since: float | None = None  # when a change began to wait for its burst

    def ready(self, now: float) -> bool:
        """Yes when the config has not changed, or its change is complete (``behind`` 0), or
        the change has waited ``limit_s`` for the rest of its burst (monotonic ``now``); no
        while more of the burst is on its way. A burst longer than the limit lets one pass
        through per ``limit_s``, each wait counted from the last pass let through."""
        if not self.config.changed.is_set() or self.config.behind <= 0:
            self._since = None
            return True
        if self._since is None:
            self._since = now
        if now - self._since >= self.limit_s:
            self._since = now  # a burst longer than the limit: one pass per limit, not each
            return True
        return False
