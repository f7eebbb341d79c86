"""The image: a multi-stage non-root Dockerfile whose command picks the service, and a
.dockerignore that keeps only the packages."""

from __future__ import annotations

import re

from tests.deploy_manifests import REPO


def test_dockerfile_is_multistage_non_root_and_lets_command_pick_the_service() -> None:
    """The image is a two-stage python:3.11-slim build running as UID 10001 with no ENTRYPOINT,
    so `command: python -m services.<name>` is the whole command line."""
    text = (REPO / "Dockerfile").read_text()
    instructions = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    image_arg = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    froms = [line for line in instructions if line.upper().startswith("FROM ")]
    assert len(froms) >= 2, "multi-stage build expected"
    bases = {
        f.split()[1].replace("${PYTHON_IMAGE}", image_arg.group(1) if image_arg else "?")
        for f in froms
    }
    assert bases == {"python:3.11-slim"}
    final_stage = instructions[instructions.index(froms[-1]) :]
    assert any(line.startswith("COPY --from=") for line in final_stage)
    users = [line for line in final_stage if line.upper().startswith("USER ")]
    assert users and users[-1].split()[1].split(":")[0] == "10001"
    assert not any(line.upper().startswith("ENTRYPOINT") for line in instructions)
    assert not any(re.search(r"\b(gcc|build-essential)\b", line) for line in final_stage)


def test_dockerignore_keeps_the_packages_in_the_build_context() -> None:
    """.dockerignore excludes everything but pyproject.toml and the packages pyproject installs."""
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    pyproject = (REPO / "pyproject.toml").read_text()
    include = re.search(r"include\s*=\s*\[([^\]]*)\]", pyproject)
    assert include
    packages = {p.strip().strip('"').rstrip("*") for p in include.group(1).split(",") if p.strip()}
    for entry in {"pyproject.toml"} | packages:
        assert f"!{entry}" in lines or f"!{entry}/" in lines, entry
