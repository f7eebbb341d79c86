"""Unknown fields in a workload object, refused as kubectl's strict field validation refuses
them (:func:`check_known_fields`): a misspelled field must not vanish with what it said (a
request, and so the quota it would hold; a queue label; a pod's containers).

The schema is kubernetes-asyncio's models (``V1Job.openapi_types``: field -> type, and
``attribute_map``: attribute -> the field's JSON name). They are imported at the first check,
never at a process's start: the package is heavy to import (tests/test_start_imports.py
keeps it out of the CLI's and the services' start).

Used by ``berth submit`` (:func:`berth_cli.writing.prepare_workload`) and by ``berth jobs
launch`` of a batch/v1 Job, where users' files come in. Not by the watcher: its Kubernetes
backend reads objects an API server has validated, and its local backend's commands come from
``berth submit`` (``berth.cmd.submit.>`` is the ``cli`` user's) or recovery (Jobs Berth
builds); checking them again would cost each local watcher that import for nothing new.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import click

from shared.workload_fields import Path, WorkloadError, mapping, path_text
from shared.workload_kinds import KINDS

__all__ = ["check_known_fields", "validate_fields", "validate_option"]


def _validation(_: click.Context, __: click.Parameter, value: str) -> str:
    return {"true": "strict", "false": "ignore"}.get(value, value)


# kubectl's --validate, as `berth submit` and `berth jobs launch` take it.
validate_option = click.option(
    "--validate",
    type=click.Choice(["strict", "warn", "ignore", "true", "false"]),
    default="strict",
    show_default=True,
    callback=_validation,
    help="Unknown fields, as kubectl's: strict (true) refuses, warn prints them, ignore"
    " (false) does not look (a cluster newer than this schema: docs/bad-input.md).",
)


def validate_fields(obj: Any, validate: str, where: str) -> None:
    """kubectl's ``--validate`` over :func:`check_known_fields`: ``strict`` refuses an
    object with an unknown field (:class:`WorkloadError`), ``warn`` prints one warning line
    for it on stderr and goes on, ``ignore`` does not look. Why not always strict: the schema
    is this kubernetes-asyncio's, and a field a newer cluster knows would be refused."""
    if validate == "ignore":
        return
    try:
        check_known_fields(obj)
    except WorkloadError as error:
        if validate == "strict":
            raise
        click.echo(f"berth: warning: {where}: {error}", err=True)

_POD_TEMPLATE = "V1PodTemplateSpec"
_OBJECT_META = "V1ObjectMeta"


def check_known_fields(obj: Any) -> None:
    """Refuse an object holding a field that its kind's schema does not know, as kubectl's
    strict server-side field validation does: :class:`WorkloadError`
    ``unknown field "spec.template.spec.containers[0].resources.requets"``, every such field
    in document order on one line. What is checked, by kind:

    - a kind of Kubernetes' own API groups (Job, Pod, Deployment, StatefulSet): the whole
      object against its model (``V1Job``...), except ``status`` (Berth drops it, as an API
      server ignores it at a create);
    - a custom resource (JobSet, RayJob, RayCluster, the Kubeflow jobs, AppWrapper,
      LeaderWorkerSet): its ``metadata`` (``V1ObjectMeta``) and each pod template Berth reads
      (``V1PodTemplateSpec``; a whole Pod, an AppWrapper component, as ``V1Pod``), where
      :data:`~shared.workload_kinds.KINDS` finds them. The limit: kubernetes-asyncio has no
      model of the rest of a custom resource, which is not checked (``spec.replicatedJobs[0]
      .replicaz`` passes, where an API server holding the CRD's schema refuses it).

    Only the names of a typed object's fields are checked: a free-form map's keys (labels,
    annotations, ``nodeSelector``, ``resources.requests``: type ``dict(...)`` or ``object``)
    may be anything, and a value of the wrong type is left to the readers of
    :mod:`shared.workloads`, as is an object of a kind Berth does not queue, or one whose pod
    templates cannot be found (they refuse it with their reason).
    """
    if not isinstance(obj, dict):
        return
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    entry = KINDS.get(kind) if isinstance(kind, str) else None
    if (
        entry is None
        or not entry.submittable
        or not isinstance(api_version, str)
        or api_version not in entry.api_versions
    ):
        return  # refused by workload_spec, or built by Berth itself (a PodGroup)
    found: list[str] = []
    if "." not in entry.group:  # Kubernetes' own group: a custom resource's group has a dot
        version = api_version.rpartition("/")[2]
        body = {key: value for key, value in obj.items() if key != "status"}
        _unknown(body, f"{version.capitalize()}{entry.kind}", (), found)
    else:
        _unknown(obj.get("metadata"), _OBJECT_META, ("metadata",), found)
        try:
            templates = entry.templates(obj, mapping(obj.get("spec"), "spec"))
        except WorkloadError:
            templates = []  # refused by workload_spec, with the reason
        for template in templates:
            where = template.path[:-1]  # the template holding the pod spec
            parent = _at(obj, where)
            if not isinstance(parent, dict):
                continue  # refused by workload_spec, with the reason
            whole_pod = parent.get("apiVersion") == "v1" and parent.get("kind") == "Pod"
            _unknown(parent, "V1Pod" if whole_pod else _POD_TEMPLATE, where, found)
    if found:
        raise WorkloadError(", ".join(f'unknown field "{path}"' for path in found))


def _at(obj: dict[str, Any], path: Path) -> Any:
    """The value at ``path``, which a kind's templates function has just walked."""
    value: Any = obj
    for step in path:
        value = value[step]
    return value


def _unknown(value: Any, type_name: str, path: Path, found: list[str]) -> None:
    """Add to ``found`` the path of each field under ``value``, of type ``type_name`` (as
    ``openapi_types`` spells it), that its model does not have."""
    if type_name.startswith("list[") and type_name.endswith("]"):
        if isinstance(value, list):
            for index, item in enumerate(value):
                _unknown(item, type_name[5:-1], (*path, index), found)
        return
    fields = _fields(type_name)
    if fields is None or not isinstance(value, dict):
        return  # a scalar, a free-form map, or a value of the wrong type: not checked here
    for key, item in value.items():
        field_type = fields.get(key)
        if field_type is None:
            found.append(path_text((*path, str(key))))
        else:
            _unknown(item, field_type, (*path, key), found)


@functools.cache
def _fields(type_name: str) -> dict[str, str] | None:
    """A model's fields by JSON name -> their type, or None when ``type_name`` names no model
    (``str``, ``datetime``, ``object``, ``dict(str, str)``...). Cached: a submit of many
    documents introspects each model once."""
    models = importlib.import_module("kubernetes_asyncio.client.models")
    model = getattr(models, type_name, None) if type_name.isidentifier() else None
    types = getattr(model, "openapi_types", None)
    if model is None or not isinstance(types, dict):
        return None
    names: dict[str, str] = model.attribute_map
    return {names[attribute]: field_type for attribute, field_type in types.items()}
