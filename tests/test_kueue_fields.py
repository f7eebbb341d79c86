"""Every field of Kueue's config objects is honoured, warned or inert (berth_cli/config_fields.py),
docs/kueue-fields.md is that table, and Kueue's objects Berth does not model are skipped with
one warning instead of failing the apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from berth_cli.config_fields import FIELD_STATUS, KINDS, field_paths, render_markdown
from berth_cli.ignored import config_ignored, warn_skipped
from berth_cli.writing import parse_config
from shared.config import ConfigError, parse_object

_DOC = Path(__file__).resolve().parent.parent / "docs" / "kueue-fields.md"


def test_every_field_has_a_status() -> None:
    """A field added to the model without a row (honoured, warned or inert) fails here."""
    walked = {(kind, path) for kind, struct in KINDS.items() for path in field_paths(struct)}
    assert sorted(walked - set(FIELD_STATUS)) == [], "fields neither honoured nor warned"
    assert sorted(set(FIELD_STATUS) - walked) == [], "rows for fields the model no longer has"


def test_the_page_is_the_table() -> None:
    """docs/kueue-fields.md is regenerated when the model or the table changes."""
    assert _DOC.read_text() == render_markdown(), (
        "docs/kueue-fields.md drifted: python -m berth_cli.config_fields > docs/kueue-fields.md"
    )


def _cq(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": spec,
    }


ACCEPTED: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "v1beta2's concurrent admission is accepted and named",
        _cq(concurrentAdmissionPolicy={"migration": {"mode": "Enabled"}}),
        ["ClusterQueue cq: spec.concurrentAdmissionPolicy"],
    ),
    (
        "v1beta2's admission checks strategy is acted on; a fungibility preference is not",
        _cq(
            admissionChecksStrategy={"admissionChecks": [{"name": "prov"}]},
            flavorFungibility={"preference": "BorrowingOverPreemption"},
        ),
        ["ClusterQueue cq: spec.flavorFungibility.preference"],
    ),
    (
        "stopPolicy and fairSharing.weight are acted on, so not named",
        _cq(stopPolicy="Hold", fairSharing={"weight": 2}),
        [],
    ),
    (
        "a Cohort's fair-sharing weight counts in hierarchical fair sharing",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": "root"},
            "spec": {"fairSharing": {"weight": 2}},
        },
        [],
    ),
    (
        "a LocalQueue's fair-sharing weight counts in admission fair sharing, so not named",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ns"},
            "spec": {"clusterQueue": "cq", "fairSharing": {"weight": 2}},
        },
        [],
    ),
    (
        "admissionScope is acted on (admission fair sharing), so not named",
        _cq(admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"}),
        [],
    ),
    (
        "preemptionPolicy at its default changes nothing and is not named",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "p"},
            "value": 5,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        [],
    ),
]


@pytest.mark.parametrize(("reason", "document", "fields"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_current_fields_are_accepted_and_named(
    reason: str, document: dict[str, Any], fields: list[str]
) -> None:
    """Fields of current Kueue releases parse; those Berth does not act on are named."""
    parse_object(document)
    assert config_ignored(document) == fields, reason


def test_a_misspelt_field_is_still_refused() -> None:
    """Accepting Kueue's fields does not mean accepting anything: a typo names its path."""
    with pytest.raises(ConfigError, match="admissionCheck"):
        parse_object(_cq(admissionCheck=["x"]))


def _object(kind: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": spec,
    }


SKIPPED: list[tuple[str, dict[str, Any], str]] = [
    (
        "its parameters object",
        _object("ProvisioningRequestConfig", provisioningClassName="x"),
        "ProvisioningRequestConfig x: needs a cluster autoscaler, not supported yet",
    ),
    (
        "topology-aware scheduling",
        _object("Topology", levels=[{"nodeLabel": "rack"}]),
        "Topology x: topology-aware scheduling is not supported",
    ),
    ("MultiKueue", _object("MultiKueueConfig", clusters=["a"]), "MultiKueue is not supported"),
    ("MultiKueue's clusters", _object("MultiKueueCluster"), "MultiKueue is not supported"),
]


@pytest.mark.parametrize(("reason", "document", "message"), SKIPPED, ids=[s[0] for s in SKIPPED])
def test_unmodelled_kueue_objects_are_skipped_with_a_warning(
    reason: str, document: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The object is accepted (the rest of the file applies) and said once on stderr."""
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
    }
    objects = parse_config([document, flavor], "f.yaml")
    assert [type(o).__name__ for o in objects] == ["ResourceFlavor"], reason
    warn_skipped("f.yaml", [document, flavor])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("berth: warning: f.yaml: "), lines
    assert message in lines[0], reason
