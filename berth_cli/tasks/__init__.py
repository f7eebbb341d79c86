"""The SkyPilot task parser of ``berth jobs launch`` (a CLI concern; the services know only
the names in :mod:`shared.tasks`):

- :mod:`.loading`: the file (a task, a pipeline, or a Job) into a :class:`ManagedJobSpec`;
- :mod:`.building`: one task into the batch/v1 Job Berth runs;
- :mod:`.resources`: ``resources`` into candidates (accelerator sets and lists, ``any_of``,
  ``ordered``, AMD and TPU devices);
- :mod:`.choosing`: which candidate runs, asked of the ClusterQueue;
- :mod:`.pod_config`: ``kubernetes.pod_config`` merged into the pod;
- :mod:`.fields`: small checks, and :class:`TaskError`.
"""

from berth_cli.tasks.building import WRAPPER, TaskSpec
from berth_cli.tasks.choosing import Flavor
from berth_cli.tasks.fields import TaskError
from berth_cli.tasks.loading import ManagedJobSpec, load_managed_job, queues_named

__all__ = [
    "WRAPPER",
    "Flavor",
    "ManagedJobSpec",
    "TaskError",
    "TaskSpec",
    "load_managed_job",
    "queues_named",
]
