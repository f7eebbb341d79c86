"""The console's settings, all from the environment (as the services take theirs).

- ``BERTH_NATS_URL``: the bus (default ``nats://127.0.0.1:4222``);
- ``BERTH_CREDS``: the ``console`` user's nkey seed (else ``$BERTH_DATA_DIR/creds/console.nk``
  or ``~/.berth/creds/console.nk``; none on an open bus); TLS from ``BERTH_NATS_CA``...;
- ``BERTH_CONSOLE_HOST`` (default ``127.0.0.1``) and ``BERTH_CONSOLE_PORT`` (default 8480; 0
  picks a free port, printed at start);
- ``BERTH_CONSOLE_TOKEN``: the operator's token for actions (cancel a managed job); unset, the
  console is read-only and refuses every POST.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.auth import ClientAuth
from shared.bus import DEFAULT_NATS_URL

__all__ = ["DEFAULT_PORT", "Settings", "SettingsError"]

DEFAULT_PORT = 8480


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    nats_url: str = DEFAULT_NATS_URL
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    auth: ClientAuth = field(default_factory=ClientAuth)  # none: an open bus

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        raw_port = env.get("BERTH_CONSOLE_PORT", str(DEFAULT_PORT))
        try:
            port = int(raw_port)
            if not 0 <= port <= 65535:
                raise ValueError
        except ValueError as error:
            raise SettingsError(f"BERTH_CONSOLE_PORT={raw_port!r} is not a port number") from error
        return cls(
            nats_url=env.get("BERTH_NATS_URL", DEFAULT_NATS_URL),
            host=env.get("BERTH_CONSOLE_HOST", "127.0.0.1"),
            port=port,
            token=env.get("BERTH_CONSOLE_TOKEN") or None,
            auth=ClientAuth.from_env("console"),
        )

    def __repr__(self) -> str:  # never print the token
        token = "set" if self.token else "unset"
        return (
            f"Settings(nats_url={self.nats_url!r}, host={self.host!r}, port={self.port},"
            f" token={token})"
        )
