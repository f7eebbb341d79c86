"""Workload priority resolution, in Kueue's order of precedence.

1. the WorkloadPriorityClass named by the ``kueue.x-k8s.io/priority-class`` label;
2. the scheduling.k8s.io PriorityClass named by the pod spec's ``priorityClassName``;
3. the pod spec's ``priority`` set directly;
4. the PriorityClass marked ``globalDefault``;
5. otherwise 0.

A named class that does not exist makes the workload inadmissible (Kueue refuses it too).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from shared.config import ConfigObject, PriorityClass, WorkloadPriorityClass

__all__ = ["PriorityTable", "UnknownPriorityClass"]


class UnknownPriorityClass(LookupError):
    """The workload names a priority class that the configuration does not define."""


@dataclass(slots=True)
class PriorityTable:
    workload_classes: dict[str, int] = field(default_factory=dict)
    pod_classes: dict[str, int] = field(default_factory=dict)
    global_default: int | None = None

    @classmethod
    def from_config(cls, objects: Iterable[ConfigObject]) -> PriorityTable:
        table = cls()
        defaults: list[tuple[int, str]] = []
        for obj in objects:
            if isinstance(obj, WorkloadPriorityClass):
                table.workload_classes[obj.metadata.name] = obj.value
            elif isinstance(obj, PriorityClass):
                table.pod_classes[obj.metadata.name] = obj.value
                if obj.global_default:
                    defaults.append((obj.value, obj.metadata.name))
        if defaults:
            # Kubernetes allows one globalDefault; with several, the highest wins as there.
            table.global_default = max(defaults)[0]
        return table

    def resolve(self, priority_class: str, priority_class_name: str, priority: int | None) -> int:
        """The base priority; raises :class:`UnknownPriorityClass` naming a missing class."""
        if priority_class:
            value = self.workload_classes.get(priority_class)
            if value is None:
                raise UnknownPriorityClass(f"WorkloadPriorityClass {priority_class} doesn't exist")
            return value
        if priority_class_name:
            value = self.pod_classes.get(priority_class_name)
            if value is None:
                raise UnknownPriorityClass(f"PriorityClass {priority_class_name} doesn't exist")
            return value
        if priority is not None:
            return priority
        return self.global_default if self.global_default is not None else 0
