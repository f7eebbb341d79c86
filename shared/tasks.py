"""What the services need to know of a managed job's task: the names the task parser (the
CLI's, ``berth_cli/tasks/``) writes into the Job it makes, and that the watcher and recovery
read back. The parser itself lives with the CLI; nothing here parses a task.
"""

from __future__ import annotations

__all__ = [
    "ACCELERATOR_LABEL",
    "FILE_MOUNTS_ANNOTATION",
    "MAX_RESTARTS_ANNOTATION",
    "RECOVER_ON_EXIT_CODES_ANNOTATION",
    "SETUP_FAILED_EXIT_CODE",
    "TASK_CONTAINER",
    "TASK_IMAGE",
    "WORKDIR_ANNOTATION",
]

SETUP_FAILED_EXIT_CODE = 86  # the job's process exits with this when `setup` failed
TASK_CONTAINER = "task"  # the container a task runs in
TASK_IMAGE = "berth/task"  # placeholder image: the backend puts its default in its place
ACCELERATOR_LABEL = "berth.dev/accelerator"  # the accelerator model the task asked for
MAX_RESTARTS_ANNOTATION = "berth.dev/max-restarts-on-errors"
# Comma-separated exit codes that always bring the job back (SkyPilot's recover_on_exit_codes).
RECOVER_ON_EXIT_CODES_ANNOTATION = "berth.dev/recover-on-exit-codes"
# The task's workdir (an absolute local path) and file mounts (JSON: target -> absolute local
# source), copied into the run's working directory by the local backend.
WORKDIR_ANNOTATION = "berth.dev/workdir"
FILE_MOUNTS_ANNOTATION = "berth.dev/file-mounts"
