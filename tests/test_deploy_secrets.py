"""Secrets and credentials: no key material in git, deploy/secrets makes exactly the Secrets the
pods mount, the console's optional token, and shared/auth.py's users against the Secrets
and seeds deployed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from berth_cli.up import CONSOLE
from berth_cli.up import SERVICES as UP_SERVICES
from tests.deploy_manifests import (
    COMPONENTS,
    DEPLOY,
    NAMESPACE,
    NATS_AUTH_SECRET,
    REPO,
    SERVICES,
    TLS_SECRET,
    Manifest,
    berth_up_components,
    fixture_compose,  # noqa: F401 - a fixture, requested by name
    fixture_manifests,  # noqa: F401 - a fixture, requested by name
    generated_secrets,
    pod_files,
    pod_templates,
    rel,
    render_secrets,
    validation_failures,
)

CONSOLE_TOKEN_SECRET = "berth-console-token"  # optional, made by hand (deploy/INSTALL.md)
_SEED = re.compile(r"\bS[UAONCXP][A-Z2-7]{56}\b")  # an nkey seed: S, its type, base32


def test_no_key_material_is_committed() -> None:
    """No file under deploy/ and no compose file holds a private key or an nkey seed, and the
    directories the guide has credentials written into are ignored by git."""
    files = [p for p in DEPLOY.rglob("*") if p.is_file()] + [REPO / "compose.yaml"]
    for path in files:
        text = path.read_text(errors="replace")
        assert "PRIVATE KEY-----" not in text, rel(path)
        assert not _SEED.search(text), f"{rel(path)} holds what looks like an nkey seed"
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for path in (
        "deploy/secrets/creds/watcher.nk",
        "deploy/secrets/creds/auth.conf",
        "creds/cli.nk",
        "creds/auth.conf",
        "somewhere/admin.nk",
    ):
        ignored = subprocess.run([git, "check-ignore", "-q", path], cwd=REPO, check=False)
        assert ignored.returncode == 0, f"{path} is not ignored by git"


def test_generated_secrets_validate_and_are_all_the_secrets_pods_need(
    manifests: list[Manifest], tmp_path: Path
) -> None:
    """deploy/secrets (rendered from dummy files) makes valid Secrets in berth-system under
    fixed names, and those plus berth-nats-tls are exactly the Secrets the pods mount."""
    rendered = render_secrets(tmp_path)
    if rendered is None:
        pytest.skip("kubectl is not installed; deploy/secrets is a secretGenerator")
    assert not validation_failures(rendered), validation_failures(rendered)
    made = {m["metadata"]["name"] for m in rendered if m["kind"] == "Secret"}
    assert made == set(generated_secrets()), "a generated name got a hash suffix?"
    assert all(m["metadata"]["namespace"] == NAMESPACE for m in rendered)
    mounted = {
        source[1]
        for _, template in pod_templates(manifests)
        for container in template["spec"]["containers"]
        for source in pod_files(manifests, template["spec"], container).values()
        if source[0] == "Secret"
    }
    assert mounted == made | {TLS_SECRET}


def test_console_token_is_optional_and_comes_from_its_own_secret(
    manifests: list[Manifest],
) -> None:
    """BERTH_CONSOLE_TOKEN comes from the optional Secret berth-console-token (the console
    starts read-only without it), which deploy/secrets does not make; no other variable of
    any Berth pod comes from a Secret."""
    for name, template in pod_templates(manifests):
        for container in template["spec"]["containers"]:
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref is None:
                    continue
                assert (name, entry["name"]) == ("berth-console", "BERTH_CONSOLE_TOKEN"), entry
                assert ref == {"name": CONSOLE_TOKEN_SECRET, "key": "token", "optional": True}
    assert CONSOLE_TOKEN_SECRET not in generated_secrets()
    install = (DEPLOY / "INSTALL.md").read_text()
    assert f"create secret generic {CONSOLE_TOKEN_SECRET} --from-literal=token=" in install


def test_bus_users_match_the_secrets_and_seeds_deployed(
    manifests: list[Manifest], compose: Manifest
) -> None:
    """The service users of shared/auth.py are exactly the services deployed, and with the
    console user exactly the components; each component has one Secret berth-creds-<user>
    (deploy/secrets) and one seed in compose; every seed or Secret named anywhere is a user
    auth.py knows, and NATS gets auth.conf under auth.py's name."""
    auth = pytest.importorskip("shared.auth", reason="shared/auth.py does not exist yet")
    assert set(auth.SERVICE_USERS) == set(SERVICES) == set(UP_SERVICES)
    assert CONSOLE in auth.USERS
    service_users = set(auth.SERVICE_USERS) | {CONSOLE}
    assert service_users == set(COMPONENTS) == set(berth_up_components())

    generated = generated_secrets()
    creds_secrets = {
        n.removeprefix("berth-creds-") for n in generated if n.startswith("berth-creds-")
    }
    assert creds_secrets == service_users
    for user in creds_secrets:
        assert generated[f"berth-creds-{user}"] == {f"{user}{auth.SEED_SUFFIX}"}
    assert generated[NATS_AUTH_SECRET] == {auth.AUTH_CONF}
    assert set(generated) == {f"berth-creds-{u}" for u in service_users} | {NATS_AUTH_SECRET}

    text = "\n".join(
        p.read_text()
        for p in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.md"), REPO / "compose.yaml"]
    )
    named = set(re.findall(r"berth-creds-([a-z]+)", text))
    named |= set(re.findall(r"(?<![$<\w])([a-z]+)\.nk\b", text))  # not $user.nk, <user>.nk
    assert named <= set(auth.USERS), named - set(auth.USERS)

    files = {s["file"] for s in compose["secrets"].values()}
    assert files == {f"./creds/{u}{auth.SEED_SUFFIX}" for u in service_users} | {
        f"./creds/{auth.AUTH_CONF}"
    }
