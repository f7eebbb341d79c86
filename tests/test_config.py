"""Kueue's objects decoded as they are written, and bad ones refused with the field named."""

from pathlib import Path

import pytest

from berth_cli.client import CliError
from berth_cli.writing import parse_config
from shared.config import (
    ClusterQueue,
    ConfigError,
    LocalQueue,
    Namespace,
    decode_object,
    encode_object,
    load_documents,
    object_key,
    parse_object,
    place_of,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _parse_file(name: str) -> list[object]:
    documents = load_documents((FIXTURES / name).read_text(), source=name)
    return [parse_object(d, where=f"{name}: document {i + 1}") for i, d in enumerate(documents)]


def test_seed_003_resources_parse_unchanged() -> None:
    """Seed 003's kueue-resources.yaml yields its five objects with exact quotas."""
    objects = _parse_file("seed003-kueue-resources.yaml")
    assert [type(o).__name__ for o in objects] == [
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "WorkloadPriorityClass",
    ]
    queue = objects[1]
    assert isinstance(queue, ClusterQueue)
    assert queue.spec.preemption.within_cluster_queue == "LowerPriority"
    assert queue.spec.namespace_selector is not None and queue.spec.namespace_selector.matches({})
    local = objects[2]
    assert isinstance(local, LocalQueue) and local.spec.cluster_queue == "cluster-queue"


def test_seed_004_cohorts_and_selectors() -> None:
    """Seed 004's v1beta1 `cohort` is read, and a matchLabels selector matches its namespace."""
    objects = _parse_file("seed004-kueue-resources.yaml")
    queues = {o.metadata.name: o for o in objects if isinstance(o, ClusterQueue)}
    assert {q.cohort_name for q in queues.values()} == {"team-ab"}
    team_a = queues["team-a-cq"]
    assert team_a.spec.preemption.borrow_within_cohort.max_priority_threshold == 100
    namespaces = {o.metadata.name: o for o in objects if isinstance(o, Namespace)}
    selector = team_a.spec.namespace_selector
    assert selector is not None
    assert selector.matches(namespaces["team-a"].labels)
    assert not selector.matches(namespaces["team-b"].labels)


def test_v1beta2_cohort_name() -> None:
    """v1beta2 spells the cohort `cohortName`; both land in the same property."""
    obj = parse_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "q"},
            "spec": {"cohortName": "c"},
        }
    )
    assert isinstance(obj, ClusterQueue) and obj.cohort_name == "c"


def test_null_namespace_selector_matches_nothing_and_expressions_work() -> None:
    """A missing selector admits no namespace; matchExpressions follow Kubernetes semantics."""
    plain = parse_object(
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "q"}}
    )
    assert isinstance(plain, ClusterQueue) and plain.spec.namespace_selector is None
    selective = parse_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "q"},
            "spec": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system"],
                        },
                        {"key": "team", "operator": "Exists"},
                    ]
                }
            },
        }
    )
    assert isinstance(selective, ClusterQueue)
    selector = selective.spec.namespace_selector
    assert selector is not None
    assert selector.matches({"kubernetes.io/metadata.name": "a", "team": "x"})
    assert not selector.matches({"kubernetes.io/metadata.name": "kube-system", "team": "x"})
    assert not selector.matches({"kubernetes.io/metadata.name": "a"})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "q"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "2x"}]}
                            ],
                        }
                    ]
                },
            },
            "`spec.resourceGroups[0].flavors[0].resources[0].nominalQuota`: invalid quantity '2x'",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "q"},
                "spec": {"cohrt": "a"},
            },
            "unknown field `cohrt`",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Frobnicator",
                "metadata": {"name": "q"},
            },
            "unknown kind 'Frobnicator'",
        ),
        (
            {"apiVersion": "kueue.x-k8s.io/v1", "kind": "LocalQueue", "metadata": {"name": "q"}},
            "LocalQueue does not exist in apiVersion 'kueue.x-k8s.io/v1'",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "q"},
            },
            "missing required field `spec`",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ResourceFlavor",
                "metadata": {"name": "Bad_Name"},
            },
            'ResourceFlavor: metadata.name "Bad_Name" is not a valid name: a lowercase RFC 1123',
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "q"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}
                            ],
                        }
                    ]
                },
            },
            "must list exactly the coveredResources",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "p"},
                "value": "high",
            },
            "Expected `int`",
        ),
        (
            {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "Configuration",
                "metadata": {"name": "berth"},
                "spec": {"admission": {"waitTargets": [{"minPriority": 100, "wait": "soon"}]}},
            },
            "`spec.admission.waitTargets[0].wait`: invalid duration 'soon'",
        ),
        (
            {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "Configuration",
                "metadata": {"name": "berth"},
                "spec": {"admission": {"waitTargets": [{"wait": "20s"}, {"wait": "30s"}]}},
            },
            "`spec.admission.waitTargets[1]`: another target already has no minPriority",
        ),
        (
            {
                "apiVersion": "berth.dev/v1alpha1",
                "kind": "Configuration",
                "metadata": {"name": "berth"},
                "spec": {"admission": {"waitTargets": [{"minPriority": 5}]}},
            },
            "missing required field `wait`",
        ),
    ],
)
def test_bad_objects_name_the_problem(document: dict[str, object], message: str) -> None:
    """Every refusal is one line that names the field or the kind at fault."""
    with pytest.raises(ConfigError) as caught:
        parse_object(document, where="x.yaml: document 1")
    text = str(caught.value)
    assert message in text and text.startswith("x.yaml: document 1") and "\n" not in text


# (text, the kinds loaded or the error, why)
LIST_CASES = [
    ("apiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n", ["A", "B"], "a List is its items"),
    ("apiVersion: v1\nkind: List\nitems: []\n", [], "an empty List is nothing"),
    ("kind: A\n---\napiVersion: v1\nkind: List\nitems: [{kind: B}]\n", ["A", "B"], "in place, among documents"),
    ("apiVersion: v1\nkind: List\nitems: [3]\n", "x.yaml: document 1: `items` of a List must be a list of objects", "an item that is no object"),
    ("apiVersion: other/v1\nkind: List\nitems: [{kind: B}]\n", ["List"], "only v1's List: another group's kind is itself"),
]


@pytest.mark.parametrize(("text", "loaded", "why"), LIST_CASES, ids=[c[2] for c in LIST_CASES])
def test_a_list_is_read_as_its_items(text: str, loaded: list[str] | str, why: str) -> None:
    if isinstance(loaded, str):
        with pytest.raises(ConfigError) as caught:
            load_documents(text, source="x.yaml")
        assert str(caught.value) == loaded, why
        return
    assert [document["kind"] for document in load_documents(text, source="x.yaml")] == loaded, why


def test_an_item_of_a_list_is_named_by_its_document_and_place() -> None:
    """An error in a List's item names where it is, not a document that does not exist."""
    text = "kind: A\n---\napiVersion: v1\nkind: List\nitems: [{kind: B}, {kind: C}]\n"
    documents = load_documents(text, source="x.yaml")
    assert [place_of(documents, "x.yaml", i) for i in range(3)] == [
        "x.yaml: document 1",
        "x.yaml: document 2, items[0]",
        "x.yaml: document 2, items[1]",
    ]
    bad = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: kueue.x-k8s.io/v1beta1, kind: Oops}\n"
    with pytest.raises(CliError, match=r"^x.yaml: document 1, items\[0\]: unknown kind 'Oops'"):
        parse_config(load_documents(bad, source="x.yaml"), "x.yaml")


def test_malformed_yaml_names_the_line() -> None:
    """A YAML syntax error says where it is."""
    with pytest.raises(ConfigError, match=r"x.yaml: malformed YAML at line 2"):
        load_documents("a: b\n  c: : d\n", source="x.yaml")


def test_round_trip_through_the_bucket_encoding() -> None:
    """What `berth apply` stores decodes to the same object, keyed by kind, namespace, name."""
    for obj in _parse_file("seed004-kueue-resources.yaml"):
        assert decode_object(encode_object(obj)) == obj  # type: ignore[arg-type]
    local = _parse_file("seed004-kueue-resources.yaml")[7]
    assert object_key(local) == "localqueue.team-a.local-queue"  # type: ignore[arg-type]


def _cq(**spec: object) -> dict[str, object]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec}


def _priority(kind: str, name: str, value: int) -> dict[str, object]:
    version = "kueue.x-k8s.io/v1beta1" if kind == "WorkloadPriorityClass" else "scheduling.k8s.io/v1"
    return {"apiVersion": version, "kind": kind, "metadata": {"name": name}, "value": value}


def _quota(value: object) -> dict[str, object]:
    return {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": value}]}]}


@pytest.mark.parametrize(
    ("document", "message", "why"),
    [
        (_cq(resourceGroups=[_quota(-4)]), "nominalQuota`: quantity -4 is negative", "a negative YAML number, as '-4' is"),
        (_cq(resourceGroups=[_quota("-4")]), "nominalQuota`: quantity '-4' is negative", "the quoted form"),
        (_cq(resourceGroups=[_quota(0.5)]), None, "0.5 as a number, as Kubernetes accepts it"),
        (_cq(resourceGroups=[_quota(2.5)]), None, "2.5 as a number"),
        (_cq(cohort="Team A"), 'spec.cohort "Team A" is not a valid name', "a cohort reference is a name"),
        ({**_cq(), "metadata": {"name": "cq\n"}}, r'metadata.name "cq\n" is not a valid name', "a trailing newline"),
        ({**_cq(), "metadata": {"name": "a" * 254}}, "must be no more than 253 characters", "a name too long"),
        ({**_cq(), "metadata": {"name": "cq", "labels": {"a": "b c"}}}, 'metadata.labels.a "b c" is not a valid label value', "a bad label value"),
        ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": "../cq"}}, 'spec.clusterQueue "../cq" is not a valid name', "a path as a ClusterQueue reference"),
        ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": "Team"}, "spec": {"clusterQueue": "cq"}}, 'metadata.namespace "Team" is not a valid namespace', "an uppercase namespace"),
        (_priority("WorkloadPriorityClass", "huge", 99999999999), "Expected `int` <= 2147483647 - at `$.value`", "a priority is an int32"),
        (_priority("WorkloadPriorityClass", "low", -(2**31) - 1), "Expected `int` >= -2147483648 - at `$.value`", "below int32 too"),
        (_priority("WorkloadPriorityClass", "top", 2**31 - 1), None, "the largest int32"),
        (_priority("PriorityClass", "huge", 5000000000), "Expected `int` <= 2147483647 - at `$.value`", "a PriorityClass's value is an int32"),
        (_priority("PriorityClass", "big", 1000000001), "maximum allowed value of a user defined priority is 1,000,000,000", "a user's class is at most 1e9, as Kubernetes validates it"),
        (_priority("PriorityClass", "big", 1000000000), None, "1e9 itself is a user's largest"),
        (_priority("PriorityClass", "system-node-critical", 2000001000), None, "Kubernetes' own class at its value (mirrored from a cluster)"),
        (_priority("PriorityClass", "system-cluster-critical", 2000000000), None, "and its other one"),
        (_priority("PriorityClass", "system-node-critical", 5), "names with 'system-' prefix are reserved for system use only", "a built-in name at another value"),
        (_priority("PriorityClass", "system-big", 2000000000), "names with 'system-' prefix are reserved for system use only", "system- is reserved, not a way past 1e9"),
        ({"apiVersion": ["x"], "kind": "LocalQueue"}, "LocalQueue does not exist in apiVersion", "an unhashable apiVersion"),
        ({"apiVersion": "v1", "kind": {"a": 1}}, "unknown kind", "an unhashable kind"),
    ],
)
def test_names_and_quantities_follow_kubernetes(document: dict[str, object], message: str | None, why: str) -> None:
    if message is None:
        parse_object(document)
        return
    with pytest.raises(ConfigError) as caught:
        parse_object(document)
    assert message in str(caught.value), why
