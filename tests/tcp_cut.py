"""A TCP proxy on loopback that can lose what is in flight, as a dying NATS node does.

Between a client and a real nats-server: :meth:`CuttableProxy.hold` stops passing the
server's bytes on to the client (they wait in the proxy), and :meth:`CuttableProxy.cut`
closes every connection through it and drops what was held. The client then reconnects
through it as to any other node; the server counted what it sent as delivered.
"""

from __future__ import annotations

import asyncio
import contextlib


class CuttableProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.holding = False
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        """Listen on a free loopback port; the URL to connect to."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{self.port}"

    def hold(self) -> None:
        self.holding = True

    async def cut(self) -> None:
        """Close every connection, dropping what was held; pass everything again after."""
        for writer in self._writers:
            writer.close()
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.holding = False

    async def close(self) -> None:
        await self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.target_port
        )
        self._writers += [writer, upstream_writer]
        for task in (
            asyncio.create_task(self._pass(reader, upstream_writer, from_server=False)),
            asyncio.create_task(self._pass(upstream_reader, writer, from_server=True)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pass(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, from_server: bool
    ) -> None:
        held: list[bytes] = []
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if from_server and self.holding:
                    held.append(data)  # in flight: lost if the connection is cut
                    continue
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()
