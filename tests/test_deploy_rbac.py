"""RBAC, derived from the watcher's code: who is bound, the ClusterRole, each managed namespace's
Role, the cluster-wide grant, the Workload features, the managed-namespaces setting, and
which pod mounts an API token."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import pytest

from tests.deploy_manifests import (
    COMPONENTS,
    NAMESPACE,
    REPO,
    Manifest,
    deployment_named,
    fixture_cluster_wide,  # noqa: F401 - a fixture, requested by name
    fixture_manifests,  # noqa: F401 - a fixture, requested by name
    fixture_namespace_grants,  # noqa: F401 - a fixture, requested by name
    manifest_key,
    one_of,
)

WATCHER_KUBE = REPO / "services" / "watcher" / "kube"
WATCHER_SA = {"kind": "ServiceAccount", "name": "berth-watcher", "namespace": NAMESPACE}


# KubeClient's methods that call the API, and the Kubernetes verb each one needs.
API_METHODS = {
    "list": "list",
    "watch": "watch",
    "get": "get",
    "create": "create",
    "patch": "patch",
    "delete": "delete",
    "read_text": "get",  # a plain-text subresource: a pod's log
}
Triple = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def _rules_as_triples(rules: list[Manifest]) -> set[Triple]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def _literal_keyword(call: ast.Call, name: str) -> str | None:
    """A keyword argument's value: the string if literal, "*" if computed, None if absent."""
    for keyword in call.keywords:
        if keyword.arg == name:
            value = keyword.value
            return str(value.value) if isinstance(value, ast.Constant) else "*"
    return None


@dataclass(frozen=True)
class ApiCall:
    """One call on a KubeClient: its module, verb, resource (None: not a named one, so the
    function serves whatever resources its callers pass) and subresource ("*": computed)."""

    module: str
    verb: str
    resource: Any
    subresource: str


def _api_calls(module: str, tree: ast.AST) -> list[ApiCall]:
    """Every ``client.<method>(...)`` / ``self.client.<method>(...)`` call in a module."""
    import importlib

    from services.watcher.kube.api import Resource

    namespace = vars(importlib.import_module(f"services.watcher.kube.{module}"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def enclosing_function(node: ast.AST) -> ast.AST:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return tree

    def resource_named(expression: ast.expr) -> Resource:
        assert isinstance(expression, ast.Name), f"{module}: {ast.unparse(expression)}"
        resource = namespace.get(expression.id)
        assert isinstance(resource, Resource), f"{module}: {expression.id} is not a Resource"
        return resource

    def resources_in(value: Any) -> list[Resource]:
        if isinstance(value, Resource):
            return [value]
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list | tuple):
            return [r for item in value for r in resources_in(item)]
        return []

    def resources_of(argument: ast.expr, call: ast.AST) -> list[Resource]:
        if not isinstance(argument, ast.Name):
            return []
        if isinstance(namespace.get(argument.id), Resource):
            return [namespace[argument.id]]
        loop: ast.AST = call
        while loop in parents:
            loop = parents[loop]
            bound = isinstance(loop, ast.For | ast.AsyncFor) and any(
                isinstance(n, ast.Name) and n.id == argument.id for n in ast.walk(loop.target)
            )
            if bound:
                assert isinstance(loop, ast.For | ast.AsyncFor)
                named = [n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)]
                return [r for name in named for r in resources_in(namespace.get(name))]
        return []

    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        method = node.func.attr
        if owner_name != "client" or method == "close":
            continue
        assert method in API_METHODS, f"{module} calls KubeClient.{method}: map it to a verb"
        verb = API_METHODS[method]
        argument = node.args[0]
        if method == "read_text":  # read_text(path): the path a Resource built
            assigned = {
                target.id: statement.value
                for statement in ast.walk(enclosing_function(node))
                if isinstance(statement, ast.Assign)
                for target in statement.targets
                if isinstance(target, ast.Name)
            }
            if isinstance(argument, ast.Name):
                argument = assigned[argument.id]
            assert isinstance(argument, ast.Call) and isinstance(argument.func, ast.Attribute)
            resource = resource_named(argument.func.value)
            calls.append(
                ApiCall(module, verb, resource, _literal_keyword(argument, "subresource") or "")
            )
            continue
        # A name bound by a `for` over module-level Resources (a tuple of them, a table's
        # .items()) is each of those; any other name that is not a module-level Resource (a
        # parameter, a loop over one) stands for whatever the function's callers pass.
        for resource in resources_of(argument, node) or [None]:
            calls.append(
                ApiCall(module, verb, resource, _literal_keyword(node, "subresource") or "")
            )
    return calls


def _kinds_tested(test: ast.expr) -> set[str]:
    """Kinds an ``if`` test pins with ``obj.get("kind") == "X"`` (or ``kind == "X"``)."""
    comparisons = test.values if isinstance(test, ast.BoolOp) else [test]
    kinds = set()
    for comparison in comparisons:
        if not (isinstance(comparison, ast.Compare) and isinstance(comparison.ops[0], ast.Eq)):
            continue
        left, right = comparison.left, comparison.comparators[0]
        is_kind = (isinstance(left, ast.Name) and left.id == "kind") or (
            isinstance(left, ast.Call)
            and isinstance(left.func, ast.Attribute)
            and left.func.attr == "get"
            and [getattr(a, "value", None) for a in left.args] == ["kind"]
        )
        if is_kind and isinstance(right, ast.Constant) and isinstance(right.value, str):
            kinds.add(right.value)
    return kinds


def _subresource_patches(tree: ast.AST, all_kinds: set[str]) -> set[tuple[str, str]]:
    """(kind, subresource) for every ``Patch(body, "<subresource>")`` a plan builds; the
    kinds are those an enclosing ``if obj.get("kind") == ...`` allows, else all."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "Patch":
            continue
        arguments = node.args[1:2] + [k.value for k in node.keywords if k.arg == "subresource"]
        if not arguments:
            continue
        assert isinstance(arguments[0], ast.Constant), "a subresource that is not a literal"
        kinds = set(all_kinds)
        child, parent = node, parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.If) and child in parent.body and _kinds_tested(parent.test):
                kinds &= _kinds_tested(parent.test)
            child, parent = parent, parents.get(parent)
        found |= {(kind, str(arguments[0].value)) for kind in kinds}
    return found


def _watcher_needs() -> tuple[set[Triple], set[Triple]]:
    """(cluster-scoped, namespaced) (group, resource, verb)s the watcher's code uses.

    Every KubeClient call in services/watcher/kube/ is read from the source. A call on a named
    Resource (``PODS``) needs its verb on that resource (and subresource: ``pods/log``). A call
    on a parameter serves what its callers pass: in watching.py every followed resource (the
    workloads and the mirrored configuration), elsewhere the workloads; a computed
    subresource (converge's ``step.subresource``) is each literal one a plan's ``Patch``
    names, for the kinds its ``if obj.get("kind") == ...`` guard lets through.
    """
    from services.watcher.kube.backend import WORKLOAD_RESOURCES
    from services.watcher.kube.kueue_status import WORKLOADS
    from services.watcher.kube.mirroring import CONFIG_RESOURCES

    trees = {p.stem: ast.parse(p.read_text()) for p in sorted(WATCHER_KUBE.glob("*.py"))}
    trees.pop("api.py".removesuffix(".py"))  # where the methods are defined
    followed = [*WORKLOAD_RESOURCES.values(), *(r for rs in CONFIG_RESOURCES.values() for r in rs)]
    followed.append(WORKLOADS)  # Kueue's Workloads, for their spec.active (kube/active.py)
    patched = set().union(
        *(_subresource_patches(t, set(WORKLOAD_RESOURCES)) for t in trees.values())
    )

    needs: list[tuple[Any, str, str]] = []  # (resource, subresource, verb)
    for module, tree in trees.items():
        for call in _api_calls(module, tree):
            if call.resource is not None:
                needs.append((call.resource, call.subresource, call.verb))
                continue
            resources = followed if module == "watching" else list(WORKLOAD_RESOURCES.values())
            for resource in resources:
                if call.subresource == "*":
                    needs += [
                        (resource, sub, call.verb)
                        for kind, sub in patched
                        if WORKLOAD_RESOURCES.get(kind) == resource
                    ]
                needs.append((resource, "", call.verb))
    cluster: set[Triple] = set()
    namespaced: set[Triple] = set()
    for resource, subresource, verb in needs:
        plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
        (namespaced if resource.namespaced else cluster).add((resource.group, plural, verb))
    return cluster, namespaced


def test_only_the_watcher_service_account_is_bound(
    manifests: list[Manifest],
    namespace_grants: dict[str, list[Manifest]],
    cluster_wide: list[Manifest],
) -> None:
    """Only the watcher's ServiceAccount is bound to any role, and no rule uses a '*' wildcard."""
    everything = manifests + cluster_wide + [m for g in namespace_grants.values() for m in g]
    bindings = [m for m in everything if m["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings, "the watcher needs a binding"
    for binding in bindings:
        assert binding["subjects"] == [WATCHER_SA], manifest_key(binding)
    for role in (m for m in everything if m["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert not any("*" in item for item in rule.get(field, [])), (
                    f"{manifest_key(role)}: wildcard in {field}: {rule}"
                )
            assert "nonResourceURLs" not in rule


def test_watcher_cluster_role_holds_only_the_cluster_scoped_reads_its_code_makes(
    manifests: list[Manifest],
) -> None:
    """The watcher's ClusterRole grants exactly the cluster-scoped (group, resource, verb)s
    its code uses (list, watch, and patches of a status subresource), and nothing namespaced:
    no Job, Pod or RayJob anywhere in the cluster."""
    cluster, _ = _watcher_needs()
    binding = one_of(manifests, "ClusterRoleBinding", "berth-watcher")
    role = one_of(manifests, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    assert role["kind"] == "ClusterRole"
    assert _rules_as_triples(role["rules"]) == cluster
    for _, resource, verb in cluster:  # reads, and at most the status Kueue's tools show
        assert verb in ("list", "watch") or (verb == "patch" and resource.endswith("/status"))
    assert not [m for m in manifests if m["kind"] in ("Role", "RoleBinding")], (
        "workload permissions belong in deploy/namespaces/, not in the base"
    )


def test_watcher_role_per_namespace_grants_exactly_what_its_code_calls(
    namespace_grants: dict[str, list[Manifest]],
) -> None:
    """In every managed namespace the watcher's Role grants exactly the namespaced
    (group, resource, verb)s its code uses: no `update` (it merge-patches), and the Job
    status patch eviction makes (on Jobs only)."""
    _, namespaced = _watcher_needs()
    assert ("batch", "jobs/status", "patch") in namespaced  # the scan sees the guarded step
    assert ("ray.io", "rayjobs/status", "patch") not in namespaced
    assert namespace_grants, "no deploy/namespaces/<namespace> overlay"
    for directory, grant in namespace_grants.items():
        roles = [m for m in grant if m["kind"] == "Role"]
        assert len(roles) == 1, directory
        assert _rules_as_triples(roles[0]["rules"]) == namespaced, directory
        assert not any(verb == "update" for _, _, verb in namespaced)
        binding = one_of(grant, "RoleBinding", "berth-watcher")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": roles[0]["metadata"]["name"],
        }
        namespace = roles[0]["metadata"]["namespace"]
        assert binding["metadata"]["namespace"] == namespace != NAMESPACE
        assert {m["kind"] for m in grant} == {"Role", "RoleBinding"}, "grants only, nothing else"


def test_cluster_wide_grant_holds_exactly_the_namespaced_calls_in_every_namespace(
    cluster_wide: list[Manifest],
) -> None:
    """deploy/cluster-wide (BERTH_MANAGED_NAMESPACES empty: every namespace) grants through a
    ClusterRole exactly what a managed namespace's Role grants, the watcher's namespaced
    calls, bound cluster-wide to the watcher alone; nothing else."""
    _, namespaced = _watcher_needs()
    assert {m["kind"] for m in cluster_wide} == {"ClusterRole", "ClusterRoleBinding"}
    binding = one_of(cluster_wide, "ClusterRoleBinding", "berth-watcher-workloads")
    role = one_of(cluster_wide, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    assert role["kind"] == "ClusterRole"
    assert _rules_as_triples(role["rules"]) == namespaced
    assert binding["subjects"] == [WATCHER_SA]


# What the watcher does with Kueue's Workloads, and the permission each needs, in whichever
# scope it manages: the grants above are derived from the code, these pin the features.
WORKLOAD_GRANTS = [
    ("workloads", "list", "the status writer probes the view; ActiveFollower lists spec.active"),
    ("workloads", "watch", "ActiveFollower follows kueuectl's stop|resume workload"),
    ("workloads", "create", "the status writer creates a Workload per workload"),
    ("workloads", "patch", "and writes Berth's spec.active on it"),
    ("workloads/status", "patch", "and its status: QuotaReserved, Admitted, Evicted, Finished"),
]
WORKLOAD_SCOPES = ["managed namespace", "cluster-wide"]


@pytest.mark.parametrize("scope", WORKLOAD_SCOPES)
@pytest.mark.parametrize(
    ("resource", "verb", "why"), WORKLOAD_GRANTS, ids=[f"{r} {v}" for r, v, _ in WORKLOAD_GRANTS]
)
def test_workload_features_are_granted_in_every_scope(
    namespace_grants: dict[str, list[Manifest]],
    cluster_wide: list[Manifest],
    scope: str,
    resource: str,
    verb: str,
    why: str,
) -> None:
    """Each Workload feature's permission is granted in each managed namespace and, for a
    cluster that manages every namespace, cluster-wide; never `update`."""
    grants = (
        list(namespace_grants.values()) if scope == "managed namespace" else [cluster_wide]
    )
    for grant in grants:
        roles = [m for m in grant if m["kind"] in ("Role", "ClusterRole")]
        granted = {t for role in roles for t in _rules_as_triples(role["rules"])}
        assert ("kueue.x-k8s.io", resource, verb) in granted, f"{scope}: {why}"
        assert ("kueue.x-k8s.io", resource, "update") not in granted, scope


def test_managed_namespaces_setting_lists_exactly_the_granted_namespaces(
    manifests: list[Manifest], namespace_grants: dict[str, list[Manifest]]
) -> None:
    """BERTH_MANAGED_NAMESPACES names exactly the namespaces that have a deploy/namespaces/
    overlay (the watcher's Role), each in a directory named after it."""
    setting = one_of(manifests, "ConfigMap", "berth-config")["data"]["BERTH_MANAGED_NAMESPACES"]
    listed = {n.strip() for n in setting.split(",") if n.strip()}
    for directory, grant in namespace_grants.items():
        namespaces = {m["metadata"]["namespace"] for m in grant}
        assert namespaces == {directory}, f"deploy/namespaces/{directory} grants {namespaces}"
    assert listed == set(namespace_grants)


def test_watcher_code_reads_the_managed_namespaces_setting(
    manifests: list[Manifest], namespace_grants: dict[str, list[Manifest]]
) -> None:
    """The watcher, with the environment its Deployment gets (berth-config, then its own
    env), manages exactly the namespaces that have its Role, and lists and watches every
    namespaced resource it follows (Jobs, Pods, RayJobs, LocalQueues, Workloads) in each of
    them, never cluster-wide (the Role would refuse that: 403); cluster-scoped configuration
    stays cluster-wide."""
    from services.watcher.kube.acting import WORKLOAD_RESOURCES
    from services.watcher.kube.kueue_status import VIEWS
    from services.watcher.kube.mirroring import CONFIG_RESOURCES
    from services.watcher.kube.settings import KubeSettings

    container = deployment_named(manifests, "watcher")["spec"]["template"]["spec"]["containers"][0]
    environ = dict(one_of(manifests, "ConfigMap", "berth-config")["data"])
    environ |= {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    namespaces = KubeSettings.from_environment(environ).namespaces
    assert namespaces.names == set(namespace_grants)
    config = [r for alternatives in CONFIG_RESOURCES.values() for r in alternatives]
    for resource in [*WORKLOAD_RESOURCES.values(), *config, *VIEWS.values()]:
        paths = [resource.path(namespace=scope) for scope in namespaces.scopes(resource)]
        if resource.namespaced:
            assert paths == [resource.path(namespace=n) for n in sorted(namespace_grants)]
        else:
            assert paths == [resource.path()], resource


@pytest.mark.parametrize("service", COMPONENTS)
def test_only_the_watcher_gets_an_api_token(manifests: list[Manifest], service: str) -> None:
    """Each service and the console has its own ServiceAccount; only the watcher mounts an API
    token."""
    pod = deployment_named(manifests, service)["spec"]["template"]["spec"]
    account = one_of(manifests, "ServiceAccount", pod["serviceAccountName"])
    assert pod["serviceAccountName"] == f"berth-{service}"
    mounted = pod.get("automountServiceAccountToken", account.get("automountServiceAccountToken"))
    if service == "watcher":
        assert mounted is not False, "the watcher needs its API token"
    else:
        assert mounted is False, f"{service} must not mount an API token"
