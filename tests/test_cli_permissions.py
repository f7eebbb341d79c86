"""A command whose credentials lack a permission fails at once, naming what NATS refused.

NATS answers an operation outside the user's permissions with an asynchronous error and keeps
the connection, so a request whose publish was refused never gets its reply: before, each
command waited out its timeouts and ended in a traceback or in "the
service did not answer". Against a real nats-server with the users' permissions; no service
runs: a refused request never reaches one, and the refusal must not pass for its absence.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import nats.errors
import pytest

from berth_cli.client import denied_message
from berth_cli.exit_codes import ExitCode
from shared.auth import ClientAuth, CredentialStore
from shared.bus import PermissionDenied
from shared.bus.violations import Violation, Violations, violation_in
from tests.cli_fork import command
from tests.conftest import REPO

APPLY = ("apply", "-f", "examples/kueue-resources.yaml")
CONFIG_INFO = "$JS.API.STREAM.INFO.KV_berth-config"  # opening the config bucket

# (command, the subject NATS refuses the reader first, why)
READER_CASES = [
    (APPLY, CONFIG_INFO, "apply opens the config bucket, which the reader may not read"),
    (
        ("submit", "-f", "examples/gpu-job.yaml"),
        CONFIG_INFO,
        "submit checks the workload's queue in the config before it sends",
    ),
    (
        ("submit", "--dry-run", "-f", "examples/gpu-job.yaml"),
        CONFIG_INFO,
        "a dry run checks the same on the bus",
    ),
    (
        ("get", "wl"),
        "berth.api.admission.workloads",
        "a refused request to admission is not admission failing to answer",
    ),
    (
        ("jobs", "cancel", "1"),
        "berth.api.recovery.cancel",
        "nor is one to recovery recovery failing to answer",
    ),
]


def _berth(url: str, seed: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of its own, signed in with ``seed``."""
    return subprocess.run(
        command(args),
        env={**os.environ, "BERTH_NATS_URL": url, "BERTH_CREDS": str(seed)},
        capture_output=True,
        text=True,
        timeout=90,  # longer than the timeouts the refusal must not wait out
        cwd=REPO,
    )


@pytest.mark.parametrize(
    ("args", "subject", "reason"), READER_CASES, ids=[c[2] for c in READER_CASES]
)
def test_a_command_refused_a_permission_says_so_in_one_line(
    args: tuple[str, ...], subject: str, reason: str, secured_url: str, store: CredentialStore
) -> None:
    reader = store.seed_path("reader")
    result = _berth(secured_url, reader, *args)
    assert result.returncode == ExitCode.ERROR, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), (reason, result.stderr)
    line = lines[0]
    assert f'may not publish to "{subject}"' in line, f"names the subject refused: {reason}"
    assert f"{reader} (user reader)" in line, "names the credential file and its user"
    assert f"cli user's credentials (BERTH_CREDS={store.seed_path('cli')})" in line, (
        "names the credentials the command needs"
    )
    assert "did not answer" not in line and "timeout" not in line, reason


def test_the_cli_users_credentials_still_apply(secured_url: str, store: CredentialStore) -> None:
    result = _berth(secured_url, store.seed_path("cli"), *APPLY)
    assert result.returncode == ExitCode.OK, result.stderr
    assert "resourceflavor.kueue.x-k8s.io/default-flavor created" in result.stdout


# (seed file's name, cli.nk beside it, refused action and subject, the line, why)
MESSAGE_CASES = [
    (
        "reader.nk",
        True,
        Violation("publish", "berth.api.admission.workloads"),
        "the credentials {dir}/reader.nk (user reader) may not publish to"
        ' "berth.api.admission.workloads": this command needs the cli user\'s credentials'
        " (BERTH_CREDS={dir}/cli.nk)",
        "another user's seed, the cli one beside it: named as the remedy",
    ),
    (
        "seed",
        False,
        Violation("publish", "$KV.berth-config.clusterqueue._.cq"),
        'the credentials {dir}/seed may not publish to "$KV.berth-config.clusterqueue._.cq":'
        " this command needs the cli user's credentials",
        "a file not named after a user: no user claimed, no file guessed",
    ),
    (
        "reader.nk",
        True,
        Violation("publish", "berth.cq.cq.admitted.default.a"),
        "the credentials {dir}/reader.nk (user reader) may not publish to"
        ' "berth.cq.cq.admitted.default.a"',
        "the cli user may not either: no remedy the CLI can tell",
    ),
    (
        "cli.nk",
        True,
        Violation("publish", "$KV.berth-secrets.s"),
        'the credentials {dir}/cli.nk (user cli) may not publish to "$KV.berth-secrets.s"',
        "the cli user refused (an old auth.conf): not told to use what it uses",
    ),
    (
        "reader.nk",
        True,
        Violation("subscribe", "_INBOX_cli.x"),
        'the credentials {dir}/reader.nk (user reader) may not subscribe to "_INBOX_cli.x":'
        " this command needs the cli user's credentials (BERTH_CREDS={dir}/cli.nk)",
        "a subscription is judged by the subscribe permissions",
    ),
]


@pytest.mark.parametrize(
    ("name", "beside", "violation", "expected", "reason"),
    MESSAGE_CASES,
    ids=[c[4] for c in MESSAGE_CASES],
)
def test_the_refusal_names_the_credentials_and_the_remedy(
    name: str, beside: bool, violation: Violation, expected: str, reason: str, tmp_path: Path
) -> None:
    if beside:
        (tmp_path / "cli.nk").write_text("seed")
    denied = PermissionDenied(violation.action, violation.subject)
    line = denied_message(ClientAuth(seed=tmp_path / name), denied)
    assert line == expected.format(dir=tmp_path), reason


# (nats-py's error, the subjects published, the violation, why)
PARSE_CASES = [
    (
        'nats: permissions violation for publish to "$kv.berth-config.clusterqueue._.cq"',
        ["berth.api.x", "$KV.berth-config.clusterqueue._.cq"],
        Violation("publish", "$KV.berth-config.clusterqueue._.cq"),
        "nats-py lowercases the text: the subject is named as it was sent",
    ),
    (
        'nats: permissions violation for publish to "berth.api.x"',
        [],
        Violation("publish", "berth.api.x"),
        "a subject no longer remembered: as NATS named it",
    ),
    (
        'nats: permissions violation for subscription to "foo.bar"',
        ["Foo.Bar"],
        Violation("subscribe", "foo.bar"),
        "a subscription: its subject as nats-py gives it",
    ),
    (
        'nats: permissions violation for subscription to "foo.bar" using queue "q"',
        [],
        Violation("subscribe", "foo.bar"),
        "a queue subscription: the subject alone, not the queue after it",
    ),
    (
        'nats: permissions violation for publish with reply of "_inbox.abc"',
        [],
        Violation("publish", "_inbox.abc"),
        "a reply subject the user may not use: named too",
    ),
    ("nats: timeout", ["x"], None, "any other error is no violation"),
]


@pytest.mark.parametrize(
    ("text", "sent", "expected", "reason"), PARSE_CASES, ids=[c[3] for c in PARSE_CASES]
)
def test_a_violation_is_read_from_nats_pys_error(
    text: str, sent: list[str], expected: Violation | None, reason: str
) -> None:
    assert violation_in(nats.errors.Error(text), sent) == expected, reason


REFUSAL = nats.errors.Error('nats: permissions violation for publish to "berth.api.x"')

# (a violation reported, the task cancelled from elsewhere, what the block raises, why)
INTERRUPT_CASES = [
    (True, False, PermissionDenied, "the violation interrupts the wait"),
    (True, True, asyncio.CancelledError, "a cancellation from elsewhere (Ctrl-C) stays one"),
    (False, True, asyncio.CancelledError, "without a violation nothing changes"),
]


@pytest.mark.parametrize(
    ("violated", "cancelled", "raised", "reason"),
    INTERRUPT_CASES,
    ids=[c[3] for c in INTERRUPT_CASES],
)
async def test_a_violation_interrupts_only_the_tasks_inside(
    violated: bool, cancelled: bool, raised: type[BaseException], reason: str
) -> None:
    violations = Violations()
    entered = asyncio.Event()
    never = asyncio.Event()
    after: list[int] = []

    async def inside() -> None:
        try:
            async with violations.interrupting():
                entered.set()
                await never.wait()  # a reply that never comes
        except PermissionDenied:
            current = asyncio.current_task()
            assert current is not None
            after.append(current.cancelling())
            await asyncio.sleep(0)  # the command still closes its connection
            raise

    waiting = asyncio.create_task(inside())
    outside = asyncio.create_task(never.wait())
    try:
        await entered.wait()
        if violated:
            violations.report(REFUSAL, [])
        if cancelled:
            waiting.cancel()
        with pytest.raises(raised):
            await waiting
        assert not outside.done(), "a task outside the block is not interrupted"
        if raised is PermissionDenied:
            assert after == [0], "the violation's cancellation is taken back"
    finally:
        outside.cancel()
        await asyncio.gather(waiting, outside, return_exceptions=True)
