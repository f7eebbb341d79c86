"""The event contract: every message Berth's services exchange, as one tagged union.

Events are msgspec Structs encoded as JSON; the ``type`` field names the variant. Each carries
an ``id`` (also sent as ``Nats-Msg-Id`` but on a per-workload copy, so a retried publish is
stored once), the ``time`` it was emitted, the emitting ``source`` service, and the identity
of the workload it is about.
Handlers must be idempotent: a redelivered event changes nothing. Events and their parts are
plain data without cycles, untracked by the garbage collector (``gc=False``: cheaper batches).

Subjects (all under ``berth.``, stable and wildcard-friendly; see :func:`subject_for`):

- ``berth.wl.<event>.<namespace>.<name>``: facts about workloads (submitted, started,
  finished, evicted, deleted), emitted by the watcher;
- ``berth.cq.<clusterqueue>.<event>.<namespace>.<name>``: decisions of admission and
  preemption (admitted, pending, evict);
- ``berth.check.<check>.<namespace>.<name>``: an admission check's answer for a workload
  (``AdmissionCheckUpdated``), from the controller behind the check or ``berth admissioncheck``;
- ``berth.cmd.<verb>.<namespace>.<name>``: commands the watcher carries out in whichever
  backend is active: ``create``/``delete`` from recovery, ``submit``/``remove`` from the CLI;
  and ``active`` from the CLI (``berth stop|resume workload``), which admission folds;
- ``berth.job.<event>.<job-id>``: managed-job lifecycle, emitted by recovery;
- ``berth.lease.<role>``: a new leader of a role took over (``LeaderElected``; see
  shared/fencing.py: every event carries its leader's ``term``).

So ``berth.>`` follows everything, ``berth.wl.*.team-a.*`` one namespace's facts,
``berth.cq.*.*.team-a.*`` one namespace's decisions and ``berth.cq.team-a-cq.>`` one
ClusterQueue's decisions. Dots in names become ``_`` in subjects; the event body keeps the
exact identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec

from shared.event_ids import new_event_id

__all__ = [
    "STATE_SUBJECTS",
    "SUBJECT_PARTS",
    "SUBJECT_ROOT",
    "AdmissionCheckUpdated",
    "ContestedResource",
    "CreateWorkload",
    "DeleteWorkload",
    "Event",
    "EvictionRequested",
    "FlavorAssignment",
    "JobStatusChanged",
    "LeaderElected",
    "PodSet",
    "PriorityBoosted",
    "RemoveWorkload",
    "SetWorkloadActive",
    "SubmitWorkload",
    "WorkloadAdmitted",
    "WorkloadDeleted",
    "WorkloadEvicted",
    "WorkloadFinished",
    "WorkloadKind",
    "WorkloadPending",
    "WorkloadPodsReady",
    "WorkloadRef",
    "WorkloadStarted",
    "WorkloadSubmitted",
    "decode_event",
    "encode_event",
    "event_json_schema",
    "new_event_id",
    "now",
    "only_reserves",
    "quota_of",
    "subject_for",
]

SUBJECT_ROOT = "berth"

UtcTime = Annotated[datetime, msgspec.Meta(tz=True)]
# Quantities on the wire are integers of milli-units (see shared.quantities).
MilliQuantities = dict[str, int]


def now() -> datetime:
    return datetime.now(UTC)


class WorkloadRef(msgspec.Struct, frozen=True, gc=False):
    """Who a workload is: the Kubernetes identity of the Job, Pod or RayJob behind it."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodSet(msgspec.Struct, frozen=True, gc=False):
    """A group of identical pods: ``count`` of them, each requesting ``requests``."""

    name: str
    count: int
    requests: MilliQuantities
    # Smallest acceptable count for partial admission (RayJob worker groups); None = count.
    min_count: int | None = None


class Toleration(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class FlavorAssignment(msgspec.Struct, frozen=True, gc=False):
    """Where one pod set landed: a flavor per resource, and what the watcher must inject."""

    pod_set: str
    count: int
    flavors: dict[str, str]  # resource -> flavor
    usage: MilliQuantities  # total for the pod set (per-pod requests x count)
    node_labels: dict[str, str] = {}
    tolerations: list[Toleration] = []


def quota_of(assignments: Iterable[FlavorAssignment]) -> dict[tuple[str, str], int]:
    """The quota assignments hold, per (flavor, resource), in milli-units."""
    usage: dict[tuple[str, str], int] = {}
    for assignment in assignments:
        for resource, amount in assignment.usage.items():
            flavor = assignment.flavors.get(resource)
            if flavor is not None:  # admission assigns a flavor to every resource it counts
                usage[(flavor, resource)] = usage.get((flavor, resource), 0) + amount
    return usage


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    id: str = msgspec.field(default_factory=new_event_id)
    time: UtcTime = msgspec.field(default_factory=now)
    source: str
    workload: WorkloadRef
    # The lease term of the replica that published it (the Bus stamps it; 0: no lease, as
    # from the CLI or a tool). A leased role's event below its role's current term is void.
    term: int = 0


# Every kind of workload object (shared/workload_kinds.py); a PodGroup is a Kueue pod group.
WorkloadKind = Literal[
    "Job",
    "Pod",
    "RayJob",
    "RayCluster",
    "JobSet",
    "PyTorchJob",
    "TFJob",
    "XGBoostJob",
    "PaddleJob",
    "JAXJob",
    "MPIJob",
    "AppWrapper",
    "LeaderWorkerSet",
    "Deployment",
    "StatefulSet",
    "PodGroup",
]


class WorkloadSubmitted(Event, frozen=True, kw_only=True, tag="WorkloadSubmitted"):
    """The watcher saw a new workload (a Job, a Pod, a JobSet...) that belongs to Berth."""

    kind: WorkloadKind
    queue_name: str
    pod_sets: list[PodSet]
    created: UtcTime
    priority_class: str = ""  # kueue.x-k8s.io/priority-class label (WorkloadPriorityClass)
    priority_class_name: str = ""  # pod spec priorityClassName (scheduling.k8s.io PriorityClass)
    priority: int | None = None  # pod spec priority, if set directly
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ContestedResource(msgspec.Struct, frozen=True, gc=False):
    """Quota a pending workload needs in a flavor where only preemption can make room."""

    flavor: str
    resource: str
    amount: int  # milli-units, for the whole workload


class WorkloadPending(Event, frozen=True, kw_only=True, tag="WorkloadPending"):
    """The workload waits; ``message`` says why, with numbers.

    Admission emits it whenever the reason changes; when ``preemption_may_help`` the
    preemption service looks for victims to free ``contested``. Preemption emits it too
    (source "preemption") to say why preemption cannot help, or until when victims are
    protected.
    """

    cluster_queue: str
    reason: str
    message: str
    priority: int = 0  # effective priority (base + ageing boost)
    preemption_may_help: bool = False
    contested: list[ContestedResource] = []


class WorkloadAdmitted(Event, frozen=True, kw_only=True, tag="WorkloadAdmitted"):
    """Admission reserved quota: the watcher may start the workload on these flavors.

    With ``reserved_only`` the quota is reserved but the workload waits for its
    ``admission_checks`` (Kueue's QuotaReserved without Admitted): it is published on
    ``berth.cq.<cq>.reserved.<ns>.<name>``, which the watcher does not read. Once every check
    is Ready, admission publishes the same generation again without ``reserved_only`` on the
    ``admitted`` subject, and the watcher starts it.
    """

    cluster_queue: str
    local_queue: str
    priority: int
    assignments: list[FlavorAssignment]
    # Increases with every admission of the same workload, so each one has its own id.
    generation: int
    admission_checks: list[str] = []  # the checks this reservation must pass
    reserved_only: bool = False


class WorkloadStarted(Event, frozen=True, kw_only=True, tag="WorkloadStarted"):
    """The watcher started the workload's pods (processes, in the local backend)."""

    generation: int


class WorkloadPodsReady(Event, frozen=True, kw_only=True, tag="WorkloadPodsReady"):
    """Every pod of this admission is ready (Kueue's PodsReady condition): the local backend's
    processes have started and passed their readiness probes (waitForPodsReady).

    ``ready: false``: pods of this admission that were all ready lost readiness (one failed,
    or was restarted; Kueue's PodsReady False, reason WaitForRecovery); a later ``ready:
    true`` says they recovered. Readers older than the field see every one as ready."""

    generation: int
    ready: bool = True


class AdmissionCheckUpdated(Event, frozen=True, kw_only=True, tag="AdmissionCheckUpdated"):
    """An admission check's answer for a workload's quota reservation (Kueue's
    ``status.admissionChecks[].state``), from the check's controller or the CLI.

    ``generation`` names the reservation answered (the ``WorkloadAdmitted`` it follows);
    0 means the workload's reservation when admission reads it. ``requeue_after_seconds``
    (with Retry) is Kueue's ``requeueAfterSeconds``: the least wait before the next try.
    """

    check: str
    state: Literal["Pending", "Ready", "Retry", "Rejected"]
    message: str = ""
    generation: int = 0
    requeue_after_seconds: int | None = None


class WorkloadFinished(Event, frozen=True, kw_only=True, tag="WorkloadFinished"):
    """The workload ran to completion; its quota can be released."""

    generation: int
    succeeded: bool
    exit_code: int | None = None
    message: str = ""


class EvictionRequested(Event, frozen=True, kw_only=True, tag="EvictionRequested"):
    """Preemption (or a stop policy) asks the watcher to stop an admitted workload."""

    cluster_queue: str
    generation: int
    reason: str  # Kueue's Evicted reason: Preempted, ClusterQueueStopped, Deleted...
    detail: str = ""  # Kueue's Preempted reason: InClusterQueue, InCohortReclamation...
    message: str = ""
    preemptor: WorkloadRef | None = None
    # Not queued again before this time (Kueue's requeueState.requeueAt): a backoff.
    requeue_at: UtcTime | None = None
    # Never queued again (Kueue's deactivation: a rejected check, the requeue limit).
    deactivated: bool = False


class WorkloadEvicted(Event, frozen=True, kw_only=True, tag="WorkloadEvicted"):
    """The watcher stopped the workload's pods; its quota is free from this moment."""

    generation: int
    reason: str
    message: str = ""


class WorkloadDeleted(Event, frozen=True, kw_only=True, tag="WorkloadDeleted"):
    """The workload's object is gone and nothing of it runs any more."""


class CreateWorkload(Event, frozen=True, kw_only=True, tag="CreateWorkload"):
    """Recovery asks the watcher to create a workload object (a managed job's attempt)."""

    object: dict[str, Any]  # the Job/Pod/RayJob, metadata.uid set by the requester


class DeleteWorkload(Event, frozen=True, kw_only=True, tag="DeleteWorkload"):
    """Recovery asks the watcher to delete a workload object (a cancelled managed job)."""


class SubmitWorkload(Event, frozen=True, kw_only=True, tag="SubmitWorkload"):
    """``berth submit`` asks the watcher to create a workload object (source ``cli``).

    The CLI has validated it and filled in what an API server would (name, uid, times); a
    cluster replaces uid and times with its own.
    """

    object: dict[str, Any]


class RemoveWorkload(Event, frozen=True, kw_only=True, tag="RemoveWorkload"):
    """``berth delete workload`` asks the watcher to delete a workload object by name.

    ``workload.uid`` is empty: the CLI names what it deletes, as kubectl does.
    """


class SetWorkloadActive(Event, frozen=True, kw_only=True, tag="SetWorkloadActive"):
    """``berth stop|resume workload`` sets Kueue's ``spec.active`` (source ``cli``); so does
    a Workload's ``spec.active`` set in the cluster (source ``watcher``: kube/active.py).

    Not a command for the watcher: admission folds it (an inactive workload is evicted,
    reason ``Deactivated``, and never admitted until it is active again). ``workload.uid``
    names the workload the CLI found, so a later one of the same name is not affected.
    """

    active: bool


class PriorityBoosted(Event, frozen=True, kw_only=True, tag="PriorityBoosted"):
    """Recovery's ageing boost for a preempted managed job's workload (see docs/ageing.md)."""

    boost: int
    reserved: bool = False  # nothing else in its ClusterQueue goes first while it waits
    can_preempt: bool = False  # whether the boost counts when it asks for preemption
    # The ageing clock: the job's first preemption (never reset). Among reservations the
    # earlier clock goes first, and the starvation bound counts from it.
    since: UtcTime | None = None


class JobStatusChanged(Event, frozen=True, kw_only=True, tag="JobStatusChanged"):
    """A managed job moved to another status (SkyPilot's statuses)."""

    job_id: int
    status: str
    recoveries: int
    message: str = ""


class LeaderElected(Event, frozen=True, kw_only=True, tag="LeaderElected"):
    """A replica took its role's lease with ``term``; from here on in the stream, that role's
    events of lower terms are void (shared/fencing.py). About no workload."""

    workload: WorkloadRef = msgspec.field(default_factory=lambda: WorkloadRef("", "", ""))
    role: str
    holder: str  # the replica id


AnyEvent = (
    WorkloadSubmitted
    | WorkloadPending
    | WorkloadAdmitted
    | WorkloadStarted
    | WorkloadPodsReady
    | WorkloadFinished
    | EvictionRequested
    | WorkloadEvicted
    | WorkloadDeleted
    | CreateWorkload
    | DeleteWorkload
    | SubmitWorkload
    | RemoveWorkload
    | SetWorkloadActive
    | PriorityBoosted
    | JobStatusChanged
    | LeaderElected
    | AdmissionCheckUpdated
)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)

# event type -> (its subjects' second token, short verb): where each event is published
SUBJECT_PARTS: dict[type[Event], tuple[str, str]] = {
    WorkloadSubmitted: ("wl", "submitted"),
    WorkloadStarted: ("wl", "started"),
    WorkloadPodsReady: ("wl", "podsready"),
    WorkloadFinished: ("wl", "finished"),
    WorkloadEvicted: ("wl", "evicted"),
    WorkloadDeleted: ("wl", "deleted"),
    WorkloadPending: ("cq", "pending"),
    WorkloadAdmitted: ("cq", "admitted"),
    EvictionRequested: ("cq", "evict"),
    CreateWorkload: ("cmd", "create"),
    DeleteWorkload: ("cmd", "delete"),
    SubmitWorkload: ("cmd", "submit"),
    RemoveWorkload: ("cmd", "remove"),
    SetWorkloadActive: ("cmd", "active"),
    PriorityBoosted: ("job", "boost"),
    JobStatusChanged: ("job", "status"),
    LeaderElected: ("lease", ""),
    AdmissionCheckUpdated: ("check", ""),
}
# event type -> its subjects' start, where the workload's name tokens follow and nothing else
_PLAIN_PREFIXES: dict[type[Event], str] = {
    kind: f"{SUBJECT_ROOT}.{family}.{verb}."
    for kind, (family, verb) in SUBJECT_PARTS.items()
    if family in ("wl", "cmd") or kind is PriorityBoosted
}
# event type -> the verb of its subjects, for the ClusterQueues' (``cq``) family
_CQ_VERBS: dict[type[Event], str] = {
    kind: verb for kind, (family, verb) in SUBJECT_PARTS.items() if family == "cq"
}


# What a service folds to know the decided state of every workload: the facts that change
# it (not WorkloadStarted: a running workload holds the same quota as an admitted one),
# admissions, evictions, pending decisions and ageing boosts (admission and preemption
# replay these).
STATE_SUBJECTS = (
    f"{SUBJECT_ROOT}.wl.submitted.>",
    f"{SUBJECT_ROOT}.wl.finished.>",
    f"{SUBJECT_ROOT}.wl.evicted.>",
    f"{SUBJECT_ROOT}.wl.deleted.>",
    f"{SUBJECT_ROOT}.cq.*.admitted.>",
    f"{SUBJECT_ROOT}.cq.*.evict.>",
    f"{SUBJECT_ROOT}.cq.*.pending.>",
    f"{SUBJECT_ROOT}.job.boost.>",
    # Admission checks and pod readiness (docs/admission-checks.md).
    f"{SUBJECT_ROOT}.cq.*.reserved.>",
    f"{SUBJECT_ROOT}.wl.podsready.>",
    f"{SUBJECT_ROOT}.check.>",
)


def subject_token(value: str) -> str:
    """Make a name safe as one subject token (Kubernetes names may contain dots)."""
    if value and "." not in value and "*" not in value and ">" not in value:
        return value  # the usual name, kept as it is without three replaces
    return value.replace(".", "_").replace("*", "_").replace(">", "_") or "_"


def only_reserves(event: Event) -> bool:
    """Whether ``event`` is an admission that only reserves quota (``reserved_only``): it is
    published on ``cq.<cq>.reserved``, not ``admitted``, which the watcher does not read; the
    workload waits for its admission checks."""
    return type(event) is WorkloadAdmitted and event.reserved_only


def subject_for(event: Event) -> str:
    ref = event.workload
    kind = type(event)
    prefix = _PLAIN_PREFIXES.get(kind)
    if prefix is not None:
        return f"{prefix}{subject_token(ref.namespace)}.{subject_token(ref.name)}"
    tail = f"{subject_token(ref.namespace)}.{subject_token(ref.name)}"
    verb = _CQ_VERBS.get(kind)
    if verb is not None:  # a ClusterQueue's decision (the most published, with admissions)
        if only_reserves(event):
            verb = "reserved"
        queue = subject_token(getattr(event, "cluster_queue", ""))
        return f"{SUBJECT_ROOT}.cq.{queue}.{verb}.{tail}"
    family, verb = SUBJECT_PARTS[kind]
    if isinstance(event, AdmissionCheckUpdated):
        return f"{SUBJECT_ROOT}.check.{subject_token(event.check)}.{tail}"
    if isinstance(event, JobStatusChanged):
        return f"{SUBJECT_ROOT}.job.status.{event.job_id}"
    if isinstance(event, LeaderElected):
        return f"{SUBJECT_ROOT}.lease.{subject_token(event.role)}"
    return f"{SUBJECT_ROOT}.{family}.{verb}.{tail}"


# An event's JSON, and any event from its JSON (raising ``msgspec.DecodeError`` naming the
# bad field's path): the encoder's and decoder's own methods, no Python call around them
# (one per event published or read).
encode_event: Callable[[Event], bytes] = _encoder.encode
decode_event: Callable[[bytes], AnyEvent] = _decoder.decode


def event_json_schema() -> dict[str, Any]:
    """The JSON Schema of every event, for tools in other languages (``berth schema``)."""
    return msgspec.json.schema(AnyEvent)
