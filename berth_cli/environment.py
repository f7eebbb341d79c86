"""Every ``BERTH_*`` environment variable, in one registry: what it means, its default and who
reads it (or, for the few Berth sets for what it runs, who sets it). docs/environment.md is
written from here (``python -m berth_cli.reference``).

The code reads its variables where it needs them; :func:`names_in_code` finds every
``"BERTH_..."`` string in the code, and tests/test_reference_docs.py fails when one is
missing from this registry (or listed here and no longer in the code).
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NOT_VARIABLES", "PACKAGES", "VARIABLES", "Variable", "names_in_code", "render"]

# The packages whose code reads the environment.
PACKAGES = ("services", "shared", "berth_cli", "berth_console")


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    default: str
    readers: str  # who reads it; for `set_for_workloads`, who sets it
    set_for_workloads: bool = False


_SERVICES = "every service (`shared/service.py`)"
_CLIENTS = "every service, the CLI and the console (`shared/auth.py`)"

VARIABLES = (
    Variable(
        "BERTH_NATS_URL",
        "Where NATS listens; a comma-separated list for a cluster. `berth up` prints it and"
        " sets it for its children; the CLI's `--nats-url` overrides it.",
        "`nats://127.0.0.1:4222`",
        "every service, the CLI, the console",
    ),
    Variable(
        "BERTH_CREDS",
        "The nkey seed file this process signs in to the bus with (its bus user's;"
        " docs/security.md). `berth up` prints the CLI's and gives each service its own.",
        "`$BERTH_DATA_DIR/creds/<user>.nk`, else `~/.berth/creds/<user>.nk`",
        _CLIENTS,
    ),
    Variable(
        "BERTH_NATS_CA",
        "A CA bundle (PEM) to verify NATS's TLS certificate with; set (or with a `tls://`"
        " URL), the connection uses TLS.",
        "unset: no TLS",
        _CLIENTS,
    ),
    Variable(
        "BERTH_NATS_CERT",
        "A client certificate (PEM) for NATS servers that verify clients.",
        "unset",
        _CLIENTS,
    ),
    Variable(
        "BERTH_NATS_KEY",
        "The private key (PEM) of `BERTH_NATS_CERT`.",
        "unset",
        _CLIENTS,
    ),
    Variable(
        "BERTH_DATA_DIR",
        "Berth's directory: the local backend's logs (`logs/`) and run directories (`runs/`),"
        " `berth up`'s NATS store and credentials (`creds/`), where a seed is looked for when"
        " `BERTH_CREDS` is unset. `berth up --data-dir` overrides it.",
        "`~/.berth`",
        "every service, `berth up`, the CLI and the console (to find a seed)",
    ),
    Variable(
        "BERTH_HTTP_HOST",
        "The address a service's `/healthz`, `/readyz`, `/metrics` and `/status` listen on.",
        "`127.0.0.1`",
        _SERVICES,
    ),
    Variable(
        "BERTH_HTTP_PORT",
        "The port of those endpoints. Taken by another process, the service exits with code 76;"
        " `berth up` then starts it again at once on a free port.",
        "watcher 8481, admission 8482, preemption 8483, recovery 8484",
        _SERVICES,
    ),
    Variable(
        "BERTH_GRACE_SECONDS",
        "On SIGTERM, how long a service drains in-flight work before it exits anyway.",
        "20 (under `berth up`: 8)",
        _SERVICES,
    ),
    Variable(
        "BERTH_REPLICA_ID",
        "This replica's id (a DNS-1123 label: the pod's name in a cluster); it names the"
        " replica in `berth status` and its lease (docs/replicas.md).",
        "`<role>-<hostname>-<pid>`; `berth up` sets `<role>-<i>`",
        "every service (`shared/lease.py`)",
    ),
    Variable(
        "BERTH_LEASE_SECONDS",
        "How long a role's lease lasts without renewal before a standby replica takes over.",
        "3",
        "every service (`shared/lease.py`)",
    ),
    Variable(
        "BERTH_STREAM_REPLICAS",
        "How many NATS servers keep each of Berth's streams and buckets.",
        "1; `berth up --nats-cluster 3` sets 3",
        "every service (`shared/bus`, `shared/deadletter.py`)",
    ),
    Variable(
        "BERTH_BUS_BATCHES",
        "`1`: a service publishes a round's events as batches, one message per subject family,"
        " each with its events' per-workload copies (docs/events.md, Batches), and the watcher"
        " writes its statuses as JetStream fast batches where nats-server is 2.14 or later,"
        " turning on `allow_batched` on the `berth-status` bucket's stream (which then needs"
        " nats-server 2.14+ to load); `0`: one message per event, statuses as plain puts, and"
        " no stream is changed. Not to be turned off again on a stream that holds batches.",
        "1",
        "every service (`shared/bus/settings.py`)",
    ),
    Variable(
        "BERTH_BUS_COPIES",
        "Which batched events are also stored on their per-workload subject"
        " (`berth.wl.<verb>.<ns>.<name>`, `berth.cq.<cq>.<verb>.<ns>.<name>`...), so that a"
        " tool follows a namespace, a ClusterQueue or a workload by subject: `all`, `none`, or"
        " a comma-separated list of subject patterns (`berth.wl.*.team-a.*,berth.job.>`). Each"
        " copy is one more message nats-server stores and indexes by subject (with `all`, most"
        " of the event stream's messages; docs/kueue-benchmark.md measures the cost). Where"
        " there are none, `berth events`, `berth describe` and the console read the same events"
        " from the batches (docs/events.md, The per-workload view). Recorded in the event"
        " stream's metadata (`berth.copies`); set it alike on every service.",
        "all",
        "every service (`shared/bus/settings.py`)",
    ),
    Variable(
        "BERTH_GC_TUNING",
        "`1`: a service runs Python's young garbage collection every 50,000 net allocations"
        " instead of 700, so it rescans its long-lived state far less often, and includes the"
        " middle generation in every third collection (not every twelfth), so no pause short"
        " of a full one scans more than three young collections' survivors; full collections"
        " keep Python's cadence. The cost: cyclic garbage lives a little longer. `0`: Python's"
        " defaults.",
        "1",
        "every service (`shared/gc_tuning.py`)",
    ),
    Variable(
        "BERTH_SUPERVISOR_PID",
        "Set by `berth up` for its children: a service whose parent is no longer that process"
        " stops, so nothing outlives the stack.",
        "unset: not supervised",
        _SERVICES,
    ),
    Variable(
        "BERTH_LOG_LEVEL",
        "The level of the JSON log lines on stderr (`debug`, `info`, `warning`, `error`).",
        "`info` (the CLI logs only errors)",
        "every service and the console (`shared/logging.py`)",
    ),
    Variable(
        "BERTH_WATCHER_BACKEND",
        "Where workloads run: `local` (processes on this machine) or `kubernetes`"
        " (docs/kubernetes.md); anything else stops the watcher with an error naming it.",
        "`local`",
        "the watcher",
    ),
    Variable(
        "BERTH_POD_GRACE_SECONDS",
        "Local backend: seconds between SIGTERM and SIGKILL when a workload's processes are"
        " stopped (eviction, delete, cancel).",
        "5",
        "the watcher (local backend)",
    ),
    Variable(
        "BERTH_MANAGED_NAMESPACES",
        "Kubernetes backend: the namespaces (comma-separated) whose Jobs, Pods and other kinds"
        " Berth manages.",
        "unset: every namespace",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_KUBE_STATUS_QPS",
        "Kubernetes backend: requests per second for Kueue status writes (Workloads, queue"
        " status, Events).",
        "20 (Kueue's client default)",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_KUBE_STATUS_BURST",
        "Kubernetes backend: the burst above that rate.",
        "30 (Kueue's client default)",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_DEFAULT_IMAGE",
        "Kubernetes backend: the image of a container created without one (a managed task that"
        " names no `image_id`, a Job whose container has no image).",
        "`ubuntu:24.04`",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_WEBHOOK_CERT",
        "Kubernetes backend: the webhook's TLS certificate (PEM); with `BERTH_WEBHOOK_KEY`,"
        " the optional admission webhook is served.",
        "unset: no webhook",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_WEBHOOK_KEY",
        "The private key (PEM) of `BERTH_WEBHOOK_CERT`.",
        "unset",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_WEBHOOK_HOST",
        "The address the webhook listens on.",
        "`0.0.0.0`",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_WEBHOOK_PORT",
        "The webhook's port.",
        "9443",
        "the watcher (Kubernetes backend)",
    ),
    Variable(
        "BERTH_CONSOLE_HOST",
        "The address the web console listens on.",
        "`127.0.0.1`",
        "the console (`berth_console/settings.py`)",
    ),
    Variable(
        "BERTH_CONSOLE_PORT",
        "The web console's port; 0 picks a free one (printed at start).",
        "8480",
        "the console",
    ),
    Variable(
        "BERTH_CONSOLE_TOKEN",
        "The operator's token for the console's actions (cancelling a managed job); unset,"
        " the console is read-only (docs/console.md).",
        "unset: read-only",
        "the console",
    ),
    Variable(
        "BERTH_POD_INDEX",
        "The pod's index in its pod set, in a locally run workload's environment (with"
        " `JOB_COMPLETION_INDEX` for indexed Jobs).",
        "",
        "the watcher (local backend)",
        set_for_workloads=True,
    ),
    Variable(
        "BERTH_TASK_SETUP",
        "A SkyPilot task's `setup:` script, in its container's environment; the task's"
        " command runs it (never interpolated). A task may not set it in `envs`.",
        "",
        "`berth jobs launch` (`berth_cli/tasks/building.py`)",
        set_for_workloads=True,
    ),
    Variable(
        "BERTH_TASK_RUN",
        "A SkyPilot task's `run:` script, the same way.",
        "",
        "`berth jobs launch`",
        set_for_workloads=True,
    ),
)

# "BERTH_..." strings in the code that are not environment variables.
NOT_VARIABLES = {
    "BERTH_DLQ": "the dead-letter stream's name (docs/bad-input.md)",
    "BERTH_PLACEMENT_PROBE": (
        "the stream `berth up` makes and deletes to see that a NATS cluster places streams"
    ),
}

_NAME = re.compile(r"BERTH_[A-Z0-9_]+")


def _sources() -> Iterator[tuple[Path, str]]:
    """Every module of :data:`PACKAGES`, and its path from the repository's root."""
    for package in PACKAGES:
        for folder in importlib.import_module(package).__path__:
            root = Path(folder).parent
            for path in sorted(Path(folder).rglob("*.py")):
                yield path, str(path.relative_to(root))


def names_in_code() -> dict[str, list[str]]:
    """Every string constant in the code that is exactly a ``BERTH_*`` name, with the files
    it appears in (relative to the repository)."""
    found: dict[str, list[str]] = {}
    for path, where in _sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if _NAME.fullmatch(node.value):
                    files = found.setdefault(node.value, [])
                    if where not in files:
                        files.append(where)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(variables: list[Variable], who: str) -> list[str]:
    rows = [f"| variable | meaning | default | {who} |", "|---|---|---|---|"]
    for v in variables:
        cells = [f"`{v.name}`", v.meaning, v.default or "-", v.readers]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return rows


def render() -> str:
    """The whole of docs/environment.md."""
    read = [v for v in VARIABLES if not v.set_for_workloads]
    set_ = [v for v in VARIABLES if v.set_for_workloads]
    lines = [
        "# Environment variables",
        "",
        "Every `BERTH_*` variable Berth reads, generated from the registry in",
        "`berth_cli/environment.py` by `.venv/bin/python -m berth_cli.reference`;",
        "`tests/test_reference_docs.py` greps the code and fails when it reads a `BERTH_*`",
        "variable this page does not list. `berth up` sets the bus's and the HTTP settings for",
        "the processes it starts; in a cluster, `deploy/` sets them in each Deployment.",
        "",
        "## Read by Berth",
        "",
        *_table(read, "read by"),
        "",
        "## Set by Berth for what it runs",
        "",
        "A workload the local backend runs does not inherit the watcher's `BERTH_*` variables",
        "(its credentials among them); it gets these:",
        "",
        *_table(set_, "set by"),
        "",
        "## Others",
        "",
        "- `_BERTH_COMPLETE`: read by click for shell completion",
        '  (`eval "$(_BERTH_COMPLETE=bash_source berth)"`; docs/cli.md).',
        "- `KUBECONFIG` and `KUBERNETES_SERVICE_HOST`: how the Kubernetes backend finds the API",
        "  server (in a pod: its service account; else the kubeconfig).",
        "",
    ]
    return "\n".join(lines)
