"""Limits on a request's head (request line and headers) for ``tfxla serve``, enforced per connection.

uvicorn's h11 protocol waits forever for a head that arrives slowly (only an idle kept-alive
connection times out), counts no headers, and bounds the head only through h11's buffer, answered
400. ``HeadLimitedH11Protocol`` adds, before the app sees a request:

* a deadline: a head not complete ``header_timeout_s`` after the connection opened, or after the
  previous response on it was sent, is answered 408 and the connection closed;
* caps: a head with more than ``max_headers`` header lines or more than ``max_header_bytes`` bytes
  is answered 431 and the connection closed.

Answers are ``{"error": "..."}`` like the app's own. A refused connection is closed the way HTTP
servers close lingering connections: the answer, then end-of-file (the client sees the connection
closed), then what the client still sends is read and dropped for up to ``LINGER_S`` before the socket
closes, since closing a socket with unread data in it resets the connection, and a reset can destroy
the answer before the client reads it. ``server.uvicorn_config`` selects this protocol whatever HTTP
implementation uvicorn would pick by itself.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("tfxla_plugin.serving")

_HEAD_END = re.compile(rb"\r?\n\r?\n")  # the blank line ending a head (h11 also accepts bare LF)
LINGER_S = 2.0  # how long a refused connection's further bytes are read and dropped before it closes


@dataclass(frozen=True)
class HeadLimits:
    header_timeout_s: float = 10.0
    max_headers: int = 100
    max_header_bytes: int = 64 << 10

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "max_headers", "max_header_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def refusal(self, buffered: bytes) -> str | None:
        """Why the head starting ``buffered`` (possibly followed by body bytes) is refused, or None."""
        buffered = buffered.lstrip(b"\r\n")  # empty lines before a request line are ignored (RFC 9112 2.2)
        end = _HEAD_END.search(buffered, 0, self.max_header_bytes + 4)
        head = buffered[:end.start()] if end else buffered
        if len(head) > self.max_header_bytes:
            return f"request head larger than {self.max_header_bytes} bytes"
        # Each line break ends the request line or a header; an unfinished head has one more line to come.
        headers = head.count(b"\n") + (1 if end and head else 0) - 1
        if headers > self.max_headers:
            return f"more than {self.max_headers} request headers"
        return None


class HeadLimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with ``limits`` on every request head (see the module docstring)."""

    limits: ClassVar[HeadLimits] = HeadLimits()

    @classmethod
    def with_limits(cls, limits: HeadLimits) -> type["HeadLimitedH11Protocol"]:
        return type(cls.__name__, (cls,), {"limits": limits})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:  # lingering after a refusal: read and drop
            return
        super().data_received(data)

    def handle_events(self) -> None:
        # Runs on new data and when a response completes (a pipelined head may wait in h11's buffer).
        if self.conn.their_state is h11.IDLE:  # reading a head: h11 holds what arrived of it, unparsed
            why = self.limits.refusal(self.conn.trailing_data[0])
            if why is not None:
                self._refuse(431, why)
                return
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the head is complete
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # the next head on this kept-alive connection has its own deadline

    # --- the deadline and the refusals ---------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._refuse(408, f"request head not complete within {self.limits.header_timeout_s:g} s")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` outside h11 (no request was parsed) and close the connection."""
        self._cancel_head_timer()
        client = "%s:%d" % self.client if self.client else "a client"
        log.warning("tfxla serve: %d to %s: %s; closing the connection", status, client, message)
        body = json.dumps({"error": message}).encode()
        head = (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
        self.transport.write(head + body)
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()
