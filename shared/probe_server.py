"""A service process's HTTP server for its probes, metrics and /status, on asyncio's streams.

The routes are few, fixed and read-only, and their callers (kubelet probes, Prometheus and
the benchmarks scraping /metrics, ``berth status`` and the console reading /status) send
plain GET requests; a web framework would cost each service process about 0.1 s of CPU
importing it at every start. Every answer closes its connection, as HTTP/1.1 allows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

__all__ = ["Answer", "ProbeServer", "Route", "answer_for", "encode", "serve_routes"]

REQUEST_LIMIT = 16 * 1024  # bytes of request line and headers read at most
READ_TIMEOUT = 30.0  # seconds a caller has to send its request


@dataclass(frozen=True, slots=True)
class Answer:
    """A response: status, body and its content type."""

    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200


Route = Callable[[], Awaitable[Answer]]


def answer_for(request_line: bytes, routes: Mapping[str, Route]) -> tuple[Answer | Route, bool]:
    """What a request line asks for, and whether the answer carries its body.

    GET and HEAD of a known path (the query string ignored) run its route; HEAD is answered
    without the body. Any other method gets 405, an unknown path 404, a line that is not
    ``METHOD TARGET HTTP/x`` 400, each with a body naming the problem.
    """
    parts = request_line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return Answer(b"400: Bad Request (not METHOD TARGET HTTP/1.x)", status=400), True
    method, target, _ = parts
    path = target.split("?", 1)[0]
    route = routes.get(path)
    if route is None:
        return Answer(b"404: Not Found", status=404), method != "HEAD"
    if method not in ("GET", "HEAD"):
        return Answer(f"405: Method Not Allowed ({method})".encode(), status=405), True
    return route, method == "GET"


def encode(answer: Answer, *, with_body: bool) -> bytes:
    """The response's bytes: status line, headers (the body's length always), the body."""
    reason = HTTPStatus(answer.status).phrase
    head = (
        f"HTTP/1.1 {answer.status} {reason}\r\n"
        f"Content-Type: {answer.content_type}\r\n"
        f"Content-Length: {len(answer.body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    return head + answer.body if with_body else head


class ProbeServer:
    """A listening server and the connections it has open; :meth:`close` stops both."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = routes
        self.open: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            wanted, with_body = answer_for(head.split(b"\r\n", 1)[0], self.routes)
            answer = wanted if isinstance(wanted, Answer) else await wanted()
            writer.write(encode(answer, with_body=with_body))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass  # the caller went away or sent no request within the limits: nothing to answer
        finally:
            self.open.discard(writer)
            writer.close()

    async def close(self) -> None:
        """Stop listening, close the connections still open (a caller that has not sent its
        request yet: Python 3.12's ``wait_closed`` waits for them), and wait for the server."""
        if self.server is None:
            return
        self.server.close()
        for writer in list(self.open):
            writer.close()
        await self.server.wait_closed()


async def serve_routes(routes: Mapping[str, Route], *, host: str, port: int) -> ProbeServer:
    """Listen on host:port and answer each request from ``routes`` (path -> route); raises
    OSError when it cannot listen. The caller closes it (:meth:`ProbeServer.close`)."""
    probes = ProbeServer(routes)
    probes.server = await asyncio.start_server(probes.serve_one, host, port, limit=REQUEST_LIMIT)
    return probes
