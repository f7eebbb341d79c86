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

__all__ = ["Answer", "Route", "answer_for", "encode", "serve_routes"]

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


async def _serve_one(
    routes: Mapping[str, Route], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
        wanted, with_body = answer_for(head.split(b"\r\n", 1)[0], routes)
        answer = wanted if isinstance(wanted, Answer) else await wanted()
        writer.write(encode(answer, with_body=with_body))
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
        pass  # the caller went away or sent no request within the limits: nothing to answer
    finally:
        writer.close()


async def serve_routes(routes: Mapping[str, Route], *, host: str, port: int) -> asyncio.Server:
    """Listen on host:port and answer each request from ``routes`` (path -> route); raises
    OSError when it cannot listen. The caller closes the server."""

    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_one(routes, reader, writer)

    return await asyncio.start_server(serve_one, host, port, limit=REQUEST_LIMIT)
