"""A task's ``resources``, read as SkyPilot reads them, into the candidates it may run as.

Spellings follow ``sky/utils/schemas.py`` and ``sky/resources.py``:

- ``cpus``: ``4``, ``0.5``, ``"4"``, ``"4+"`` ("at least": the number is requested);
- ``memory``: a bare number is GB, SkyPilot's GB being 2**30 bytes (``"16"``, ``16``,
  ``"16+"`` -> ``16Gi``); units ``KB/KI/MB/MI/GB/GI/TB/TI/PB/PI`` in any case, all binary;
- ``accelerators``: ``"T4"``, ``"T4:4"``, ``{"T4": 4}``, a set ``{L4: 8, A10g: 8}`` or a list
  ``[L4:8, A100:8]`` (also as the strings ``"{L4:8, A10g:8}"`` / ``"[L4:8, A100:8]"``): each
  entry is a candidate (:func:`accelerator_resource` says which resource it requests);
- ``any_of`` / ``ordered``: candidate resources, each merged over the task's own;
- ``job_recovery``: a strategy name, or ``{strategy, max_restarts_on_errors,
  recover_on_exit_codes}``;
- ``image_id``: ``docker:<image>``, or an image name as SkyPilot on Kubernetes takes it; a
  mapping (an image per region) is a VM image: ignored.

Every candidate is returned, in the order written, each with the reason it cannot run on
Kubernetes if it cannot (another cloud, a device Berth cannot request); which one runs is
:mod:`.choosing`'s rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from berth_cli.tasks.fields import Fail, show, string_map

__all__ = ["Candidate", "accelerator_resource", "parse_resources"]

_RESOURCE_FIELDS = {
    "cloud", "region", "zone", "infra", "cpus", "memory", "accelerators", "instance_type",
    "use_spot", "job_recovery", "spot_recovery", "volumes", "disk_size", "ephemeral_storage",
    "disk_tier", "network_tier", "local_disk", "max_hourly_cost", "ports", "labels",
    "accelerator_args", "image_id", "autostop", "priority", "priority_class", "any_of",
    "ordered",
}  # fmt: skip
# Accepted, with no effect on a Berth job.
_IGNORED_RESOURCE_FIELDS = (
    "region", "zone", "instance_type", "use_spot", "volumes", "disk_size", "ephemeral_storage",
    "disk_tier", "network_tier", "local_disk", "max_hourly_cost", "ports", "accelerator_args",
    "autostop", "priority", "priority_class",
)  # fmt: skip
# SkyPilot's memory units (sky/skylet/constants.py MEMORY_SIZE_UNITS): all binary.
_MEMORY_UNITS = {
    "kb": 1 << 10, "ki": 1 << 10, "mb": 1 << 20, "mi": 1 << 20, "gb": 1 << 30, "gi": 1 << 30,
    "tb": 1 << 40, "ti": 1 << 40, "pb": 1 << 50, "pi": 1 << 50,
}  # fmt: skip
_NUMBER = re.compile(r"^(?:\d+\.?\d*|\.\d+)$")
# GKE's TPU slice types (SkyPilot's GKE_TPU_ACCELERATOR_TO_GENERATION): google.com/tpu chips.
_TPU_SLICES = frozenset(
    {
        "tpu-v4-podslice",
        "tpu-v5-lite-device",
        "tpu-v5-lite-podslice",
        "tpu-v5p-slice",
        "tpu-v6e-slice",
    }
)
_AMD = re.compile(r"^(?:MI\d{2,3}[A-Z]?|Radeon.*)$", re.IGNORECASE)
# Devices of other vendors that SkyPilot knows and Berth cannot request on Kubernetes.
_OTHER_DEVICES = {
    "inferentia": "AWS Neuron", "inferentia2": "AWS Neuron", "trainium": "AWS Neuron",
    "trainium2": "AWS Neuron", "gaudi": "Intel Gaudi", "gaudi2": "Intel Gaudi",
    "gaudi3": "Intel Gaudi",
}  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    """One way the task may run: what each node requests, and where it was written."""

    path: str  # "resources", "resources.any_of[1]", "resources.accelerators[1]"...
    cpu_milli: int | None = None
    memory_bytes: int | None = None
    accelerator: str | None = None  # the model, as written ("A100", "tpu-v5-lite-podslice")
    device: str = ""  # its resource: nvidia.com/gpu, amd.com/gpu, google.com/tpu
    count: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 0
    recover_on_exit_codes: tuple[int, ...] = ()
    image: str | None = None
    refused: str | None = None  # why it cannot run on Kubernetes; None: it can
    refused_path: str = ""


def accelerator_resource(model: str) -> str:
    """The Kubernetes resource a SkyPilot accelerator requests, or :class:`Fail` saying why
    none: a GKE TPU slice type (``tpu-v5-lite-podslice``...) is ``google.com/tpu`` (its count
    in chips); an AMD Instinct (``MI300X``...) or Radeon is ``amd.com/gpu``; another ``tpu-``
    name is a TPU VM, which runs on GCP and not on Kubernetes; AWS Neuron and Intel Gaudi
    devices are refused; any other model is an NVIDIA GPU, ``nvidia.com/gpu``, as SkyPilot on
    Kubernetes counts it. Never an AMD or TPU device counted as NVIDIA."""
    lowered = model.lower()
    if lowered in _TPU_SLICES:
        return "google.com/tpu"
    if lowered.startswith("tpu-"):
        raise Fail(
            "resources.accelerators",
            f"{model} is a Cloud TPU VM, which runs on GCP, not Kubernetes; on GKE name a TPU"
            f" slice type ({', '.join(sorted(_TPU_SLICES))})",
        )
    if _AMD.match(model):
        return "amd.com/gpu"
    if lowered in _OTHER_DEVICES:
        raise Fail(
            "resources.accelerators",
            f"{model} ({_OTHER_DEVICES[lowered]}) is not a device Berth can request on Kubernetes",
        )
    return "nvidia.com/gpu"


def parse_resources(value: Any, ignored: list[str]) -> list[Candidate]:
    """Every candidate the task's ``resources`` allow, in the order written (see the module)."""
    if value is None:
        return [Candidate(path="resources")]
    if not isinstance(value, dict):
        raise Fail("resources", f"must be a mapping, got {show(value)}")
    base = {k: v for k, v in value.items() if k not in ("any_of", "ordered")}
    _check_fields(base, "resources")
    if "any_of" in value and "ordered" in value:
        raise Fail("resources", "give either any_of or ordered, not both")
    alternatives: list[tuple[str, dict[str, Any]]] = [("resources", base)]
    for key in ("any_of", "ordered"):
        if key not in value:
            continue
        listed = value[key]
        if not isinstance(listed, list) or not listed:
            raise Fail(f"resources.{key}", "must be a non-empty list of resources")
        alternatives = []
        for index, item in enumerate(listed):
            path = f"resources.{key}[{index}]"
            if not isinstance(item, dict):
                raise Fail(path, "must be a mapping")
            _check_fields(item, path)
            alternatives.append((path, {**base, **item}))
    candidates: list[Candidate] = []
    for path, merged in alternatives:
        ignored.extend(f"resources.{k}" for k in _IGNORED_RESOURCE_FIELDS if k in merged)
        candidates += _candidates(path, merged, ignored)
    return candidates


def _check_fields(mapping: dict[str, Any], path: str) -> None:
    for key in mapping:
        if key not in _RESOURCE_FIELDS or key in ("any_of", "ordered"):
            raise Fail(f"{path}.{key}", "unknown resources field")


def _candidates(path: str, merged: dict[str, Any], ignored: list[str]) -> list[Candidate]:
    refused, refused_path = _not_kubernetes(merged, path)
    recovery = merged.get("job_recovery")
    if recovery is None:
        recovery = merged.get("spot_recovery")  # the older spelling
    restarts, codes = _job_recovery(recovery)
    image = merged.get("image_id")
    if isinstance(image, dict):  # an image per region or cloud: a VM image, not a container's
        ignored.append("resources.image_id")
        image = None
    if image is not None and (not isinstance(image, str) or image in ("", "docker:")):
        raise Fail("resources.image_id", f"expected 'docker:<image>', got {show(image)}")
    candidate = Candidate(
        path=path,
        cpu_milli=_cpus(merged["cpus"]) if merged.get("cpus") is not None else None,
        memory_bytes=_memory(merged["memory"]) if merged.get("memory") is not None else None,
        labels=string_map(merged.get("labels"), "resources.labels"),
        max_restarts=restarts,
        recover_on_exit_codes=codes,
        image=image.removeprefix("docker:") if isinstance(image, str) else None,
        refused=refused,
        refused_path=refused_path,
    )
    if merged.get("accelerators") is None:
        return [candidate]
    result = []
    options = _accelerators(merged["accelerators"])
    for index, (model, count) in enumerate(options):
        where = path if len(options) == 1 else f"{path}.accelerators[{index}]"
        try:
            device = accelerator_resource(model)
        except Fail as failure:
            result.append(replace(candidate, path=where, accelerator=model, count=count,
                                  refused=candidate.refused or failure.message,
                                  refused_path=candidate.refused_path or failure.path))  # fmt: skip
            continue
        result.append(replace(candidate, path=where, accelerator=model, device=device, count=count))
    return result


def _not_kubernetes(merged: dict[str, Any], path: str) -> tuple[str | None, str]:
    cloud = merged.get("cloud")
    if cloud is not None and (
        not isinstance(cloud, str) or cloud.lower() not in ("kubernetes", "k8s")
    ):
        return f"Berth runs tasks on Kubernetes, got {show(cloud)}", "resources.cloud"
    infra = merged.get("infra")
    if infra is not None and (
        not isinstance(infra, str) or not re.match(r"^(?i:kubernetes|k8s)(?:/.+)?$", infra)
    ):
        return f"Berth runs tasks on Kubernetes, got {show(infra)}", "resources.infra"
    return None, ""


def _cpus(value: Any) -> int:
    path = "resources.cpus"
    text = _number_text(value, path, "a number or a string '<number>+'")
    number = _decimal(text, path, value)
    if number <= 0:
        raise Fail(path, f"must be positive, got {show(value)}")
    return int((number * 1000).to_integral_value(rounding=ROUND_CEILING))


def _memory(value: Any) -> int:
    path = "resources.memory"
    text = _number_text(
        value, path, "GB as a number, or '<size>[KB|MB|GB|TB|PB]' with optional '+'"
    )
    multiplier = 1 << 30  # a bare number is GB
    lowered = text.lower()
    for unit, size in _MEMORY_UNITS.items():
        if lowered.endswith(unit):
            text, multiplier = text[: -len(unit)], size
            break
    number = _decimal(text, path, value)
    if number <= 0:
        raise Fail(path, f"must be positive, got {show(value)}")
    return int((number * multiplier).to_integral_value(rounding=ROUND_CEILING))


def _number_text(value: Any, path: str, expected: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Fail(path, f"invalid value {show(value)}: expected {expected}")
    text = str(value).strip()
    if text.endswith("+"):  # "at least": Berth requests the number
        text = text[:-1]
    return text


def _decimal(text: str, path: str, original: Any) -> Decimal:
    digits = text.strip()
    if not _NUMBER.match(digits):
        raise Fail(path, f"invalid value {show(original)}")
    try:
        return Decimal(digits)
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise Fail(path, f"invalid value {show(original)}") from None


def _accelerators(value: Any) -> list[tuple[str, int]]:
    """The accelerator options, in order: (model, count)."""
    path = "resources.accelerators"
    options: list[tuple[str, Any]] = []
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "{[" and text[-1:] in "}]":
            items = [item.strip() for item in text[1:-1].split(",") if item.strip()]
        else:
            items = [text]
        options = [_accelerator_item(item, path) for item in items]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise Fail(f"{path}[{index}]", f"expected '<name>[:<count>]', got {show(item)}")
            options.append(_accelerator_item(item, f"{path}[{index}]"))
    elif isinstance(value, dict):
        for model, count in value.items():
            if count is None and ":" in str(model):  # YAML reads {L4:8} as {"L4:8": None}
                options.append(_accelerator_item(str(model), path))
            else:
                options.append((str(model), 1 if count is None else count))
    else:
        raise Fail(path, f"invalid value {show(value)}: expected '<name>[:<count>]' or a mapping")
    if not options:
        raise Fail(path, f"invalid value {show(value)}: names no accelerator")
    result = []
    for model, count in options:
        if not model:
            raise Fail(path, f"invalid value {show(value)}: empty accelerator name")
        if isinstance(count, bool) or not isinstance(count, int | float):
            raise Fail(f"{path}.{model}", f"invalid count {show(count)}")
        if count <= 0 or count != int(count):
            raise Fail(
                path, f"invalid count {show(count)} for {model}: takes a positive whole number"
            )
        result.append((model, int(count)))
    return result


def _accelerator_item(item: str, path: str) -> tuple[str, Any]:
    parts = item.split(":")
    if len(parts) == 1:
        return parts[0].strip(), 1
    if len(parts) != 2:
        raise Fail(path, f"invalid value {item!r}: expected '<name>' or '<name>:<count>'")
    try:
        count = float(parts[1])
    except ValueError:
        raise Fail(path, f"invalid value {item!r}: expected '<name>:<count>'") from None
    return parts[0].strip(), int(count) if count.is_integer() else count


def _job_recovery(value: Any) -> tuple[int, tuple[int, ...]]:
    """(max_restarts_on_errors, recover_on_exit_codes) of ``job_recovery``."""
    path = "resources.job_recovery"
    if value is None or isinstance(value, str):
        return 0, ()  # a strategy name: Berth's one strategy is to requeue
    if not isinstance(value, dict):
        raise Fail(path, f"must be a strategy name or a mapping, got {show(value)}")
    for key in value:
        if key not in ("strategy", "max_restarts_on_errors", "recover_on_exit_codes"):
            raise Fail(f"{path}.{key}", "unknown job_recovery field")
    strategy = value.get("strategy")
    if strategy is not None and not isinstance(strategy, str):
        raise Fail(f"{path}.strategy", f"must be a string, got {show(strategy)}")
    codes = value.get("recover_on_exit_codes")
    listed = [] if codes is None else codes if isinstance(codes, list) else [codes]
    for code in listed:
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
            raise Fail(
                f"{path}.recover_on_exit_codes", f"exit codes are 0 to 255, got {show(code)}"
            )
    restarts = value.get("max_restarts_on_errors", 0)
    if restarts is None:
        return 0, tuple(listed)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise Fail(
            f"{path}.max_restarts_on_errors",
            f"must be a non-negative integer, got {show(restarts)}",
        )
    return restarts, tuple(listed)
