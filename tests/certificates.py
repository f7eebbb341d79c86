"""A throwaway TLS certificate for tests that serve or check TLS (the webhook, NATS's config)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed_certificate(
    directory: Path, common_name: str, dns_name: str | None = None
) -> tuple[Path, Path]:
    """``tls.crt`` and ``tls.key`` in ``directory``: a self-signed EC P-256 certificate for
    ``common_name`` (and ``dns_name`` as its subject alternative name), valid for a day, made
    by the openssl CLI; the test is skipped where openssl is not installed."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = directory / "tls.crt", directory / "tls.key"
    alternative = [] if dns_name is None else ["-addext", f"subjectAltName=DNS:{dns_name}"]
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={common_name}",
            *alternative,
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key
