"""The console's queue actions: stop or resume a ClusterQueue or LocalQueue.

What a stop or resume writes is shared/queue_stop.py's rule, the one ``berth stop|resume``
follows: ``stop`` drains (HoldAndDrain) unless "keep already running" is ticked (Hold),
``resume`` clears the policy. The HTTP side (app.py) lets an action through only with the
operator's token; this module turns the form into that rule and the outcome into a notice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from berth_console.model import Model
from berth_console.pages.base import path_part
from shared.queue_stop import StopOutcome, StopPolicy, stop_policy_for

__all__ = ["QUEUE_NOTICES", "QueueAction", "queue_action"]

# ?notice= values the queue actions redirect with (app.py shows them; never request text).
QUEUE_NOTICES = {
    "queue-drained": (
        "ok",
        "Queue stopped (HoldAndDrain): nothing new is admitted and its admitted workloads"
        " are evicted.",
    ),
    "queue-held": (
        "ok",
        "Queue stopped (Hold): nothing new is admitted; what runs is left to finish.",
    ),
    "queue-resumed": ("ok", "Queue resumed: it admits again."),
    "queue-unchanged": ("ok", "Nothing changed: the queue already had that stop policy."),
}


@dataclass(frozen=True)
class QueueAction:
    """One stop or resume asked for through the console."""

    kind: str  # ClusterQueue or LocalQueue
    name: str
    namespace: str  # "" for a ClusterQueue
    policy: StopPolicy

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def back(self, model: Model) -> str:
        """The page to return to: the ClusterQueue's, or a LocalQueue's ClusterQueue's."""
        if self.kind == "ClusterQueue":
            return f"/cq/{path_part(self.name)}"
        for local in model.local_queues:
            meta = local.get("metadata", {})
            if (meta.get("namespace"), meta.get("name")) == (self.namespace, self.name):
                cluster_queue = local.get("spec", {}).get("clusterQueue")
                if cluster_queue:
                    return f"/cq/{path_part(cluster_queue)}"
        return "/"

    @staticmethod
    def notice(outcome: StopOutcome) -> str:
        if not outcome.changed:
            return "queue-unchanged"
        if outcome.policy == "None":
            return "queue-resumed"
        return "queue-drained" if outcome.policy == "HoldAndDrain" else "queue-held"


def queue_action(
    kind: str, name: str, namespace: str, verb: str, form: Mapping[str, object]
) -> QueueAction:
    """The action a form asks for: ``verb`` is ``stop`` or ``resume``; a ticked
    ``keep_already_running`` box makes a stop a Hold (the CLI's --keep-already-running)."""
    keep = form.get("keep_already_running") in ("on", "true", "1")
    policy = stop_policy_for(stop=verb == "stop", keep_already_running=keep)
    return QueueAction(kind, name, namespace if kind == "LocalQueue" else "", policy)
