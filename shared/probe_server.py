"""A service process's HTTP server for its probes, metrics and /status, on asyncio's streams.

The routes are few, fixed and read-only, and their callers (kubelet probes, Prometheus and
the benchmarks scraping /metrics, ``berth status`` and the console reading /status) send
plain GET requests; a web framework would cost each service process its import at every
start (docs/kueue-benchmark.md, "Starting"). Every answer closes its connection, as HTTP/1.1
allows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

from shared.logging import get_logger

__all__ = [
    "Answer",
    "ProbeServer",
    "Route",
    "answer_for",
    "answer_route",
    "encode",
    "read_head",
    "serve_routes",
]

REQUEST_LIMIT = 16 * 1024  # bytes of request line and headers read at most
READ_TIMEOUT = 30.0  # seconds a caller has to send its request, and to take the answer
CLOSE_GRACE = 1.0  # seconds close() lets a request being answered finish before cancelling it

log = get_logger("probes")


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


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The request line and headers, to the blank line that ends them; None when the caller
    stops sending first or sends more than REQUEST_LIMIT bytes. Lines may end in CRLF or a bare
    LF (``printf 'GET /healthz HTTP/1.0\\n\\n' | nc``), which HTTP lets a recipient accept."""
    head = b""
    while b"\n\n" not in head and b"\n\r\n" not in head:
        if len(head) > REQUEST_LIMIT:
            return None
        chunk = await reader.read(REQUEST_LIMIT)
        if not chunk:
            return None
        head += chunk
    return head


async def answer_route(route: Route, request_line: bytes) -> Answer:
    """The route's answer; a route that raises (a collector failing inside /metrics) is
    answered 500 with a body naming the error, and logged."""
    try:
        return await route()
    except Exception as error:
        path = request_line.decode("latin-1").split()[1].split("?", 1)[0]
        problem = f"{type(error).__name__}: {error}"
        log.error("probe_route_failed", path=path, error=problem)
        return Answer(f"500: Internal Server Error ({problem})".encode(), status=500)


class ProbeServer:
    """A listening server, the connections it has open and their handler tasks (it owns them:
    :meth:`close` stops all three). ``io_timeout`` bounds both the caller's sending of its request
    and its taking of the answer."""

    def __init__(self, routes: Mapping[str, Route], *, io_timeout: float = READ_TIMEOUT) -> None:
        self.routes = routes
        self.io_timeout = io_timeout
        self.open: set[asyncio.StreamWriter] = set()
        self.handlers: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task: asyncio.Task[None] | None = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
        self.open.add(writer)
        try:
            head = await asyncio.wait_for(read_head(reader), self.io_timeout)
            if head is None:
                return  # the caller went away or sent too much: nothing to answer
            line = head.split(b"\n", 1)[0]
            wanted, with_body = answer_for(line, self.routes)
            answer = wanted if isinstance(wanted, Answer) else await answer_route(wanted, line)
            writer.write(encode(answer, with_body=with_body))
            await asyncio.wait_for(writer.drain(), self.io_timeout)
        except TimeoutError:
            writer.transport.abort()  # a caller that does not send or read: drop what is unsent
        except (asyncio.CancelledError, OSError):
            # cancelled by close() (ended here: asyncio's 3.11 stream callback logs a cancelled
            # handler as an error), or the caller went away
            pass
        finally:
            self.open.discard(writer)
            writer.close()
            if task is not None:
                self.handlers.discard(task)

    async def close(self, *, grace: float = CLOSE_GRACE) -> None:
        """Stop listening, close the connections still open (a caller that has not sent its
        request yet: Python 3.12's ``wait_closed`` waits for them), let the handlers finish
        within ``grace`` seconds, cancel and await what remains, and wait for the server."""
        if self.server is None:
            return
        self.server.close()
        for writer in list(self.open):
            writer.close()
        if self.handlers:
            _, pending = await asyncio.wait(set(self.handlers), timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self.server.wait_closed()


async def serve_routes(
    routes: Mapping[str, Route], *, host: str, port: int, io_timeout: float = READ_TIMEOUT
) -> ProbeServer:
    """Listen on host:port and answer each request from ``routes`` (path -> route); raises
    OSError when it cannot listen. The caller closes it (:meth:`ProbeServer.close`)."""
    probes = ProbeServer(routes, io_timeout=io_timeout)
    probes.server = await asyncio.start_server(probes.serve_one, host, port, limit=REQUEST_LIMIT)
    return probes
