"""Request-head limits of ``tfxla serve`` (``serving.limits``) against real sockets on 127.0.0.1.

uvicorn runs ``server.uvicorn_config`` (the configuration ``tfxla serve`` uses) around a tiny app in
a thread, with a 1 s header timeout, 20 headers and 4096 head bytes. Clients that send their head
one byte at a time are answered 408 and closed once the timeout has passed, while other clients are
served; heads over the caps get 431; bodies are not counted as head. ``test_serving_http`` checks
the same through the ``tfxla serve`` flags.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tfxla_plugin.serving.limits import HeadLimits
from tfxla_plugin.serving.server import uvicorn_config

LIMITS = HeadLimits(header_timeout_s=1.0, max_headers=20, max_header_bytes=4096)
MARGIN_S = 1.5  # scheduling slack on a loaded machine


async def _echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"{request.method} {len(await request.body())} {len(request.headers)}")


@pytest.fixture(scope="module")
def port():
    import uvicorn

    app = Starlette(routes=[Route("/", _echo, methods=["GET", "POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn_config(app, limits=LIMITS, shutdown_timeout_s=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)
    sock.close()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def _read_response(s: socket.socket) -> bytes:
    """One response (head and Content-Length body) from a connection kept open."""
    out = b""
    while b"\r\n\r\n" not in out or len(out.partition(b"\r\n\r\n")[2]) < int(
            re.search(rb"content-length: (\d+)", out.partition(b"\r\n\r\n")[0], re.I).group(1)):
        chunk = s.recv(65536)
        assert chunk, f"connection closed after {out!r}"
        out += chunk
    return out


def _exchange(port: int, raw: bytes) -> bytes:
    with contextlib.closing(_connect(port)) as s:
        s.sendall(raw)
        return _read_all(s)


def _status_and_body(answer: bytes) -> tuple[int, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _head(n_headers: int, pad: int = 0, close: bool = True) -> bytes:
    """A GET head with ``n_headers`` headers (Host and Connection among them) and ``pad`` filler bytes."""
    lines = [b"GET / HTTP/1.1", b"Host: x", b"Connection: " + (b"close" if close else b"keep-alive")]
    lines += [b"X-%d: 1" % i for i in range(n_headers - 2)]
    if pad:
        lines[-1] += b"a" * pad
    return b"\r\n".join(lines)


def test_slow_heads_are_closed_after_the_timeout_while_others_are_served(port) -> None:
    slow = [_connect(port) for _ in range(20)]
    opened = time.monotonic()
    head = _head(10)
    closed_at: dict[int, float] = {}
    answers: dict[int, bytes] = {}
    for s in slow:
        s.setblocking(False)
    served = None
    i = 0
    while len(closed_at) < len(slow) and time.monotonic() - opened < LIMITS.header_timeout_s + MARGIN_S + 1:
        for k, s in enumerate(slow):
            if k in closed_at:
                continue
            with contextlib.suppress(BlockingIOError):
                chunk = s.recv(65536)
                answers[k] = answers.get(k, b"") + chunk
                if not chunk:
                    closed_at[k] = time.monotonic() - opened
                    continue
            with contextlib.suppress(BlockingIOError, OSError):
                s.send(head[i:i + 1])  # one byte per round, never the blank line that ends the head
        if served is None and i == 2:  # slow clients are mid-head: another client is still served
            served = _status_and_body(_exchange(port, _head(3) + b"\r\n\r\n"))
        i += 1
        time.sleep(0.1)
    for s in slow:
        s.close()
    assert served == (200, b"GET 0 3")
    assert sorted(closed_at) == list(range(len(slow))), f"still open: {sorted(set(range(len(slow))) - set(closed_at))}"
    assert min(closed_at.values()) >= LIMITS.header_timeout_s - 0.05
    assert max(closed_at.values()) <= LIMITS.header_timeout_s + MARGIN_S
    for answer in answers.values():
        status, body = _status_and_body(answer)
        assert status == 408 and json.loads(body) == {"error": "request head not complete within 1 s"}


def test_the_next_head_on_a_kept_alive_connection_has_its_own_deadline(port) -> None:
    with contextlib.closing(_connect(port)) as s:
        s.sendall(_head(3, close=False) + b"\r\n\r\n")
        assert _status_and_body(_read_response(s)) == (200, b"GET 0 3")
        answered = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the second head stops here
        rest = _read_all(s)
        waited = time.monotonic() - answered
    assert _status_and_body(rest)[0] == 408
    assert LIMITS.header_timeout_s - 0.05 <= waited <= LIMITS.header_timeout_s + MARGIN_S


def test_header_count_cap(port) -> None:
    assert _status_and_body(_exchange(port, _head(20) + b"\r\n\r\n")) == (200, b"GET 0 20")
    status, body = _status_and_body(_exchange(port, _head(21) + b"\r\n\r\n"))
    assert status == 431 and json.loads(body) == {"error": "more than 20 request headers"}


def test_header_count_cap_applies_to_a_head_sent_in_pieces(port) -> None:
    raw = _head(200) + b"\r\n\r\n"
    with contextlib.closing(_connect(port)) as s:
        with contextlib.suppress(OSError):  # the server may close before the last piece
            for start in range(0, len(raw), 7):
                s.sendall(raw[start:start + 7])
        status, body = _status_and_body(_read_all(s))
    assert status == 431 and b"more than 20 request headers" in body


def test_header_bytes_cap(port) -> None:
    exact = _head(3, pad=4096 - len(_head(3)))
    assert len(exact) == LIMITS.max_header_bytes
    assert _status_and_body(_exchange(port, exact + b"\r\n\r\n")) == (200, b"GET 0 3")
    status, body = _status_and_body(_exchange(port, exact + b"a\r\n\r\n"))
    assert status == 431 and json.loads(body) == {"error": "request head larger than 4096 bytes"}
    # An unfinished head that is already too long is refused without waiting for its end.
    with contextlib.closing(_connect(port)) as s:
        s.sendall(exact + b"a")
        assert _status_and_body(_read_all(s))[0] == 431


def test_a_body_larger_than_the_head_cap_is_not_head(port) -> None:
    body = b"x" * 200_000
    raw = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert _status_and_body(_exchange(port, raw)) == (200, b"POST 200000 3")


def test_pipelined_requests_are_each_answered(port) -> None:
    raw = _head(3, close=False) + b"\r\n\r\n" + _head(4) + b"\r\n\r\n"
    answer = _exchange(port, raw)
    assert answer.count(b"HTTP/1.1 200 OK") == 2 and answer.endswith(b"GET 0 4")


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_headers must be positive, got 0"):
        HeadLimits(max_headers=0)
