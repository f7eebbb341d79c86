"""``python -m berth_console``: the web console, configured from the environment
(``settings.py`` lists the variables); prints its URL once it listens."""

from __future__ import annotations

import asyncio
import sys

from berth_console.server import run_console
from berth_console.settings import Settings, SettingsError
from shared.logging import configure_logging


def main() -> None:
    configure_logging(service="console")
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(f"berth console: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    raise SystemExit(asyncio.run(run_console(settings)))


if __name__ == "__main__":
    main()
