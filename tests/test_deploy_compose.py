"""compose.yaml: the containers `berth up` starts, each signed in with its own seed, NATS with
auth.conf, ports on loopback only, the console's token, and the minimal credentials helper."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from berth_cli.up import CONSOLE
from tests.deploy_manifests import (
    COMPONENTS,
    NATS_IMAGE,
    PORTS,
    REPO,
    Manifest,
    auth_conf,
    berth_up_components,
    check_with_nats_server,
    conf_block,
    conf_value,
    fixture_compose,  # noqa: F401 - a fixture, requested by name
    module_of,
)


def _one_shots(compose: Manifest) -> set[str]:
    return {n for n, s in compose["services"].items() if s.get("restart") == "no"}


def _mounts(service: Manifest) -> dict[str, tuple[str, bool]]:
    """A compose service's volumes (short syntax): target -> (source, read-only)."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target, *options = entry.split(":")
        mounts[target] = (source, "ro" in options)
    return mounts


def test_compose_runs_nats_and_the_services_berth_up_starts(compose: Manifest) -> None:
    """compose.yaml runs nats plus one container per component `berth up` starts (the services
    and the console), each running the module `berth up` runs for it once NATS is healthy and
    the one-shot helpers have completed; `up --wait` can finish because every one-shot is
    waited for by the services."""
    services = compose["services"]
    one_shots = _one_shots(compose)
    assert set(services) - one_shots == {"nats"} | set(berth_up_components())
    for name in berth_up_components():
        command = services[name]["command"]
        if isinstance(command, str):
            command = command.split()
        assert command == ["python", "-m", module_of(name)], name
        depends = services[name]["depends_on"]
        assert depends["nats"]["condition"] == "service_healthy"
        for helper in one_shots:
            assert depends[helper]["condition"] == "service_completed_successfully", name
        assert "build" in services[name]
        assert services[name]["environment"]["BERTH_NATS_URL"] == "nats://nats:4222"
    assert services["nats"]["image"] == NATS_IMAGE
    assert services["creds"]["image"] == NATS_IMAGE  # the one-shot that copies the seeds


@pytest.mark.parametrize("service", COMPONENTS)
def test_compose_service_signs_in_with_its_own_seed(compose: Manifest, service: str) -> None:
    """Each compose service's (and the console's) BERTH_CREDS is its own user's seed, in a volume only it mounts
    (read-only), which the one-shot `creds` fills from ./creds/<user>.nk, as `berth creds
    init ./creds` writes it."""
    services = compose["services"]
    env = services[service]["environment"]
    seed = Path(env["BERTH_CREDS"])
    assert seed.name == f"{service}.nk"
    volume, read_only = _mounts(services[service])[str(seed.parent)]
    assert read_only, f"{service} may write its credentials"
    for other, spec in services.items():
        if other not in (service, "creds"):
            assert volume not in {s for s, _ in _mounts(spec).values()}, f"{other} sees {volume}"

    helper = services["creds"]
    into = {source: target for target, (source, _) in _mounts(helper).items()}[volume]
    secret = next(s for s in helper["secrets"] if s["target"] == seed.name)
    assert compose["secrets"][secret["source"]]["file"] == f"./creds/{seed.name}"
    script = helper["command"][-1].replace("$$", "$")
    users = re.search(r"for user in ([\w ]+); do", script)
    assert users and service in users.group(1).split()
    assert into == "/creds/$user".replace("$user", service)
    assert '"/run/secrets/$user.nk"' in script and '"/creds/$user/$user.nk"' in script
    assert "chown 10001:10001" in script and services[service]["user"].startswith("10001:")


def test_compose_nats_includes_auth_conf_and_nats_server_accepts_it(
    compose: Manifest, tmp_path: Path
) -> None:
    """Compose's NATS reads deploy/compose/nats.conf, whose include lands on ./creds/auth.conf
    mounted beside it, and nats-server (-t) accepts it with `berth creds init`'s auth.conf."""
    nats = compose["services"]["nats"]
    conf_target = nats["command"][nats["command"].index("--config") + 1]
    config = next(c for c in nats["configs"] if c["target"] == conf_target)
    conf_file = REPO / compose["configs"][config["source"]]["file"]
    text = conf_file.read_text()
    include = re.search(r'^\s*include\s+"?([^"\s]+)"?', text, re.M)
    assert include, "no include in the compose NATS config"
    included = str(Path(conf_target).parent / include.group(1))
    secret = next(s for s in nats["secrets"] if s["target"] == included)
    assert compose["secrets"][secret["source"]]["file"] == "./creds/auth.conf"
    assert conf_value(conf_block(text, "jetstream"), "store_dir") in _mounts(nats)

    root = tmp_path / "root"
    (root / included.lstrip("/")).parent.mkdir(parents=True)
    (root / included.lstrip("/")).write_text(auth_conf(tmp_path / "creds"))
    rewritten = re.sub(r"(?m)^(\s*store_dir:\s*)(\S+)", rf"\g<1>{root}\g<2>", text)
    (root / conf_target.lstrip("/")).write_text(rewritten)
    check_with_nats_server(root / conf_target.lstrip("/"))


def test_compose_publishes_default_ports_on_loopback_only(compose: Manifest) -> None:
    """Compose services and the console listen on 0.0.0.0 at their default port, published on
    127.0.0.1 only."""
    for name, service in compose["services"].items():
        for mapping in service.get("ports", []):
            assert isinstance(mapping, str) and mapping.startswith("127.0.0.1:"), (name, mapping)
        if name == "nats" or name in _one_shots(compose):
            continue
        port = PORTS[name]
        env = service["environment"]
        prefix = "BERTH_CONSOLE" if name == CONSOLE else "BERTH_HTTP"
        assert env[f"{prefix}_HOST"] == "0.0.0.0"
        assert env[f"{prefix}_PORT"] == str(port)
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
        assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])


def test_compose_console_token_comes_from_the_environment(compose: Manifest) -> None:
    """Compose's console takes BERTH_CONSOLE_TOKEN from the shell (or .env), unset by default
    (read-only); no other container is given it."""
    holders = {
        name
        for name, service in compose["services"].items()
        if "BERTH_CONSOLE_TOKEN" in service.get("environment", {})
    }
    assert holders == {CONSOLE}
    env = compose["services"][CONSOLE]["environment"]
    assert env["BERTH_CONSOLE_TOKEN"] == "${BERTH_CONSOLE_TOKEN:-}"


def test_compose_credentials_helper_is_minimal(compose: Manifest) -> None:
    """The one-shot `creds` has no network and only the two capabilities its copy needs."""
    helper = compose["services"]["creds"]
    assert helper["network_mode"] == "none"
    assert helper["cap_drop"] == ["ALL"]
    assert set(helper["cap_add"]) == {"DAC_READ_SEARCH", "CHOWN"}
    assert "no-new-privileges:true" in helper["security_opt"]
    assert not helper.get("ports")
