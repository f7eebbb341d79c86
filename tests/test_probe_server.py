"""shared/probe_server.py: a service's probes, metrics and /status over asyncio's streams.

The table holds what a request line gets (route or error, body or not); one in-process server
on a real loopback socket answers raw requests as kubelet, Prometheus and ``berth status`` send
them, and ``urllib`` (an ordinary client) reads an answer whose connection closes."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from shared.probe_server import Answer, Route, answer_for, encode, serve_routes


async def _ok() -> Answer:
    return Answer(b"ok")


async def _json() -> Answer:
    return Answer(b'{"a":1}', content_type="application/json")


ROUTES: dict[str, Route] = {"/healthz": _ok, "/status": _json}

# (request line, the route or the error status, whether the body is sent, reason)
REQUESTS = [
    (b"GET /healthz HTTP/1.1", "/healthz", True, "a known path"),
    (b"GET /healthz?verbose=1 HTTP/1.1", "/healthz", True, "the query string is ignored"),
    (b"HEAD /status HTTP/1.1", "/status", False, "HEAD: the route's headers, no body"),
    (b"GET /healthz HTTP/1.0", "/healthz", True, "an HTTP/1.0 caller"),
    (b"GET /nothing HTTP/1.1", 404, True, "an unknown path"),
    (b"HEAD /nothing HTTP/1.1", 404, False, "an unknown path asked with HEAD: no body"),
    (b"GET /healthz/ HTTP/1.1", 404, True, "a trailing slash is another path"),
    (b"POST /healthz HTTP/1.1", 405, True, "the routes are read-only"),
    (b"DELETE /status HTTP/1.1", 405, True, "the routes are read-only"),
    (b"GET /healthz", 400, True, "no protocol"),
    (b"GET /healthz FTP/1.1", 400, True, "not HTTP"),
    (b"", 400, True, "an empty line"),
]


@pytest.mark.parametrize(("line", "expected", "with_body", "reason"), REQUESTS)
def test_answer_for(line: bytes, expected: str | int, with_body: bool, reason: str) -> None:
    wanted, body = answer_for(line, ROUTES)
    if isinstance(expected, str):
        assert wanted is ROUTES[expected], reason
    else:
        assert isinstance(wanted, Answer) and wanted.status == expected, reason
        assert wanted.body.startswith(str(expected).encode() + b": "), "the body names it"
    assert body == with_body, reason


# (answer, with body, the exact bytes, reason)
ENCODED = [
    (
        Answer(b"ok"),
        True,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n"
        b"Connection: close\r\n\r\nok",
        "a plain answer",
    ),
    (
        Answer(b"not ready", status=503),
        False,
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Length: 9\r\nConnection: close\r\n\r\n",
        "HEAD: the body's length, without the body",
    ),
    (
        Answer(b"{}", content_type="application/json"),
        True,
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
        b"Connection: close\r\n\r\n{}",
        "another content type",
    ),
]


@pytest.mark.parametrize(("answer", "with_body", "expected", "reason"), ENCODED)
def test_encode(answer: Answer, with_body: bool, expected: bytes, reason: str) -> None:
    assert encode(answer, with_body=with_body) == expected, reason


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    writer.write_eof()  # a caller that sends no more: an incomplete request is not waited for
    answer = await reader.read()  # to the end: the server closes the connection
    writer.close()
    await writer.wait_closed()
    return answer


async def test_a_server_answers_raw_requests_and_closes() -> None:
    server = await serve_routes(ROUTES, host="127.0.0.1", port=0)
    try:
        probe = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.30\r\n\r\n"
        assert (await _exchange(server.port, probe)).endswith(b"\r\n\r\nok")
        missing = await _exchange(server.port, b"GET /x HTTP/1.1\r\n\r\n")
        assert missing.startswith(b"HTTP/1.1 404 Not Found\r\n")
        assert await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n") == b"", "no end"
        url = f"http://127.0.0.1:{server.port}/status"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
        assert body == b'{"a":1}'
    finally:
        await server.close()


async def test_closing_ends_a_connection_that_sent_nothing() -> None:
    server = await serve_routes(ROUTES, host="127.0.0.1", port=0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for _ in range(1000):  # until the server has taken the connection (at most 10 s)
        if server.open:
            break
        await asyncio.sleep(0.01)
    taken = set(server.open)
    assert taken, "the server took the connection"
    await server.close()  # would wait for the idle caller on Python 3.12 without closing it
    assert all(connection.is_closing() for connection in taken), "closed by close()"
    assert await reader.read() == b"", "closed without an answer"
    writer.close()


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):  # at most 10 s: the condition is reached, not timed
        if condition():
            return
        await asyncio.sleep(0.01)


def _handler_tasks() -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if "serve_one" in repr(task.get_coro())]


async def test_closing_leaves_no_handler_task() -> None:
    """An idle caller and one whose route is still running: close() ends both handlers (the
    route cancelled after the grace), none ends cancelled (Python 3.11's stream callback logs a
    cancelled handler as "Exception in callback"), and none is left for asyncio.run to cancel."""
    entered = asyncio.Event()

    async def stuck() -> Answer:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    server = await serve_routes({"/stuck": stuck}, host="127.0.0.1", port=0)
    idle = await asyncio.open_connection("127.0.0.1", server.port)
    busy = await asyncio.open_connection("127.0.0.1", server.port)
    busy[1].write(b"GET /stuck HTTP/1.1\r\n\r\n")
    await asyncio.wait_for(entered.wait(), 10)
    await _until(lambda: len(_handler_tasks()) == 2)
    taken = set(_handler_tasks())
    assert len(taken) == 2, "both connections are being handled"
    await server.close(grace=0.01)
    assert all(task.done() and not task.cancelled() for task in taken), "ended, not cancelled"
    assert not server.handlers and not _handler_tasks(), "no handler left running"
    for reader, writer in (idle, busy):
        assert await reader.read() == b"", "closed without an answer"
        writer.close()


async def test_a_raising_route_is_answered_500() -> None:
    async def failing() -> Answer:
        raise RuntimeError("collector failed")

    server = await serve_routes({"/metrics": failing}, host="127.0.0.1", port=0)
    try:
        with capture_logs() as logged:
            answer = await _exchange(server.port, b"GET /metrics?x=1 HTTP/1.1\r\n\r\n")
    finally:
        await server.close()
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert answer.endswith(b"\r\n\r\n500: Internal Server Error (RuntimeError: collector failed)")
    assert [(line["event"], line["path"], line["error"]) for line in logged] == [
        ("probe_route_failed", "/metrics", "RuntimeError: collector failed")
    ], "one line naming the path and the error"


async def test_a_caller_that_does_not_read_is_dropped() -> None:
    """An answer larger than the socket buffers to a caller that never reads: the handler
    gives up after its timeout instead of waiting in drain() for ever."""

    async def large() -> Answer:
        return Answer(b"x" * (32 * 1024 * 1024))

    server = await serve_routes({"/large": large}, host="127.0.0.1", port=0, io_timeout=0.2)
    caller = socket.socket()
    caller.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    caller.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(caller, ("127.0.0.1", server.port))
        await loop.sock_sendall(caller, b"GET /large HTTP/1.1\r\n\r\n")
        await _until(lambda: bool(_handler_tasks()))
        await _until(lambda: not _handler_tasks())
        assert not _handler_tasks() and not server.open, "the handler gave up on the caller"
    finally:
        caller.close()
        await server.close()


async def test_bare_lf_line_ends_are_accepted() -> None:
    server = await serve_routes(ROUTES, host="127.0.0.1", port=0)
    try:
        answer = await _exchange(server.port, b"GET /healthz HTTP/1.0\nHost: x\n\n")
    finally:
        await server.close()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nok")
