"""Runs the serving app under uvicorn until SIGTERM or SIGINT, then shuts down cleanly.

The socket is bound here before the model loads (so ``port=0`` picks a free port that the
startup log line shows, and a busy port is a clear error at once rather than uvicorn's
``sys.exit``) and listens once the model is loaded. On
SIGTERM/SIGINT uvicorn stops accepting, lets in-flight requests finish (at most
``shutdown_timeout_s``), runs the app's shutdown (batcher drained, pool closed) and returns;
``serve`` then returns 0. Every request head has a deadline and size caps (``limits``), so
slow or oversized heads cannot hold connections open.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading

from tfxla_plugin.serving.app import make_app
from tfxla_plugin.serving.limits import HeadLimitedH11Protocol, HeadLimits

log = logging.getLogger("tfxla_plugin.serving")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening; raises OSError naming the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_config(app, *, limits: HeadLimits = HeadLimits(), shutdown_timeout_s: float = 30.0):
    """uvicorn's configuration for ``app``: HTTP/1.1 through h11 with ``limits`` on request heads."""
    import uvicorn

    return uvicorn.Config(app, http=HeadLimitedH11Protocol.with_limits(limits), log_config=None,
                          access_log=False, lifespan="on", timeout_graceful_shutdown=shutdown_timeout_s,
                          h11_max_incomplete_event_size=limits.max_header_bytes + 4)


def serve(model_dir, model_name: str, *, host: str = "127.0.0.1", port: int = 8501,
          shutdown_timeout_s: float = 30.0, header_timeout_s: float = 10.0, max_headers: int = 100,
          max_header_bytes: int = 64 << 10, **app_options) -> int:
    """Loads the model, serves it until SIGTERM/SIGINT, returns 0 after a clean shutdown.

    ``header_timeout_s``, ``max_headers`` and ``max_header_bytes`` bound each request head
    (``limits.HeadLimits``: 408 / 431); ``app_options`` are ``make_app``'s keyword options
    (batching, num_workers, ...).
    """
    import uvicorn

    limits = HeadLimits(header_timeout_s, max_headers, max_header_bytes)  # ValueError before anything starts
    sock = bind(host, port)  # first, so a busy port fails before the (slow) model load
    try:
        app = make_app(model_dir, model_name, **app_options)
    except BaseException:
        sock.close()
        raise
    sock.listen(1024)  # clients are refused until the model is loaded, then queue until served
    server = uvicorn.Server(uvicorn_config(app, limits=limits, shutdown_timeout_s=shutdown_timeout_s))
    # uvicorn handles the signals while it runs and re-raises a caught one once it has shut down;
    # with these handlers that re-raise only asks for the exit already under way (status 0), and a
    # signal arriving just before uvicorn takes over still stops it.
    def request_exit(*_):
        server.should_exit = True

    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, request_exit) for sig in _SIGNALS} if main else {}
    state = app.state.tfxla
    log.info("tfxla serve: model '%s' (%s%s%s) at %s/v1/models/%s  [workers=%d, batching=%s, inter-op threads=%s]",
             model_name, state.model.model_dir, ", wrapped" if state.model.manifest else "",
             ", jit" if state.model.jit else "", _url(sock),
             model_name, state.options.workers,
             f"max {state.options.max_batch_size} rows / {state.options.batch_timeout_micros} us"
             if state.options.batching else "off",
             getattr(state.model, "inter_op_threads", 0) or "TF default")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        log.error("tfxla serve: the server did not start (see the errors above)")
        return 1
    log.info("tfxla serve: stopped")
    return 0
