"""Runs the REST app (uvicorn) and the gRPC services on one event loop until SIGTERM or SIGINT, then shuts down cleanly.

The REST socket is bound here before the models load (so ``rest_api_port="auto"`` picks a free port that
the startup log line shows, and a busy port is a clear error at once rather than uvicorn's
``sys.exit``) and listens once they are loaded; the gRPC server (``grpc_api``) starts next, then the
version poll (``manager.ModelManager.start``). Ports follow TF Serving: gRPC on ``port`` (8500; None:
no gRPC), REST on ``rest_api_port`` (8501; 0 disables it); ``"auto"`` picks a free port for either. On
SIGTERM/SIGINT both stop accepting, let in-flight requests finish (at most ``shutdown_timeout_s``),
then the batchers are drained and the pool closed; ``serve`` returns 0. Every REST request head has
a deadline and size caps (``limits``), so slow or oversized heads cannot hold connections open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from typing import Iterator

from tfxla_plugin.serving import config as serving_config
from tfxla_plugin.serving import grpc_api
from tfxla_plugin.serving.app import build_app, make_core
from tfxla_plugin.serving.core import ServeOptions, ServingCore
from tfxla_plugin.serving.limits import HeadLimitedH11Protocol, HeadLimits

log = logging.getLogger("tfxla_plugin.serving")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRPC_PORT, REST_PORT = 8500, 8501
IF_INSTALLED = "if installed"  # ``port``: 8500 where the gRPC packages are installed, else no gRPC (a warning)


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


def uvicorn_config(app, *, limits: HeadLimits = HeadLimits(), shutdown_timeout_s: float = 30.0,
                   lifespan: str = "on"):
    """uvicorn's configuration for ``app``: HTTP/1.1 through h11 with ``limits`` on request heads."""
    import uvicorn

    return uvicorn.Config(app, http=HeadLimitedH11Protocol.with_limits(limits), log_config=None,
                          access_log=False, lifespan=lifespan, timeout_graceful_shutdown=shutdown_timeout_s,
                          h11_max_incomplete_event_size=limits.max_header_bytes + 4)


def _uvicorn_server(config):
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server without its own signal handling: ``_run`` owns SIGINT/SIGTERM for REST and gRPC."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


def _startup_lines(core: ServingCore, rest_url: str | None, grpc_address: str | None) -> None:
    o = core.options
    details = (f"[workers={o.workers}, batching="
               + (f"max {o.max_batch_size} rows / {o.batch_timeout_micros} us" if o.batching else "off")
               + ", inter-op threads=")
    for name in core.manager.names:
        versions = [s for s in core.manager.live() if s.name == name]
        where = f"at {rest_url}/v1/models/{name}" if rest_url else "over gRPC only"
        if not versions:
            log.info("tfxla serve: model '%s' (no versions under %s yet) %s", name, core.manager.config(name).base_path,
                     where)
        for s in versions:
            m = s.model
            log.info("tfxla serve: model '%s' version %d (%s%s%s) %s  %s%s]", name, s.version, m.model_dir,
                     ", wrapped" if m.manifest else "", ", jit" if m.jit else "", where, details,
                     getattr(m, "inter_op_threads", 0) or "TF default")
    if grpc_address:
        log.info("tfxla serve: gRPC (PredictionService, ModelService) at %s", grpc_address)
    if o.prometheus_path and rest_url:
        log.info("tfxla serve: Prometheus metrics at %s%s", rest_url, o.prometheus_path)


async def _run(core: ServingCore, host: str, rest_sock: socket.socket | None, grpc_port: int | None,
               limits: HeadLimits, shutdown_timeout_s: float) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    main = threading.current_thread() is threading.main_thread()
    for sig in _SIGNALS if main else ():
        loop.add_signal_handler(sig, stop.set)
    grpc_server = rest = rest_task = None
    try:
        grpc_address = None
        if grpc_port is not None:
            grpc_server, bound = await grpc_api.start(core, host, grpc_port)
            grpc_address = f"{host}:{bound}"
        if rest_sock is not None:
            app = build_app(core)
            rest = _uvicorn_server(uvicorn_config(app, limits=limits, shutdown_timeout_s=shutdown_timeout_s,
                                                  lifespan="off"))
            rest_task = asyncio.create_task(rest.serve(sockets=[rest_sock]))
            while not rest.started and not rest_task.done():
                await asyncio.sleep(0.01)
            if not rest.started:
                log.error("tfxla serve: the REST server did not start (see the errors above)")
                return 1
        _startup_lines(core, _url(rest_sock) if rest_sock is not None else None, grpc_address)
        core.manager.start()
        waits = {asyncio.create_task(stop.wait())} | ({rest_task} if rest_task else set())
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        log.info("tfxla serve: stopping (in-flight requests get up to %g s)", shutdown_timeout_s)
        if rest is not None:
            rest.should_exit = True
        await asyncio.gather(*([rest_task] if rest_task else []),
                             *([grpc_server.stop(shutdown_timeout_s)] if grpc_server else []))
        return 0
    finally:
        for sig in _SIGNALS if main else ():
            loop.remove_signal_handler(sig)
        await loop.run_in_executor(None, core.manager.stop)
        await core.shutdown()


def _port(value: int | str) -> int:
    """A port flag's value: a number, or "auto" (a free port: the startup lines show which)."""
    if value == "auto":
        return 0
    if isinstance(value, str) and not value.isdigit():
        raise ValueError(f"invalid port {value!r}: a number or 'auto'")
    port = int(value)
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid port {port}: 0..65535")
    return port


def serve(model_dir=None, model_name: str = "default", *, model_base_path=None, model_config_file=None,
          host: str = "127.0.0.1", port: int | str | None = GRPC_PORT, rest_api_port: int | str = REST_PORT,
          file_system_poll_wait_seconds: float = 1.0, shutdown_timeout_s: float = 30.0,
          header_timeout_s: float = 10.0, max_headers: int = 100, max_header_bytes: int = 64 << 10,
          **options) -> int:
    """Loads the models, serves them until SIGTERM/SIGINT, returns 0 after a clean shutdown.

    The models: ``model_dir`` (one SavedModel, version 1), ``model_base_path`` (numbered versions) or
    ``model_config_file`` (TF Serving's text format), exactly one of them (``config.model_configs``).
    ``port``: gRPC (None: off; ``IF_INSTALLED``: 8500 if grpcio and tensorflow-serving-api are installed,
    else off with a warning), ``rest_api_port``: REST (0: off, as in TF Serving); ``"auto"`` picks a
    free port for either (and 0 does for gRPC). ``header_timeout_s``, ``max_headers`` and ``max_header_bytes``
    bound each REST request head (``limits.HeadLimits``: 408 / 431); ``options`` are
    ``core.ServeOptions``' fields (batching, num_workers, jit, ...).
    """
    limits = HeadLimits(header_timeout_s, max_headers, max_header_bytes)  # ValueError before anything starts
    serve_options = ServeOptions.of(**options)
    configs = serving_config.model_configs(model_dir, model_name, model_base_path, model_config_file)
    rest_off = rest_api_port != "auto" and _port(rest_api_port) == 0
    why = None
    if port == IF_INSTALLED:
        why = grpc_api.missing()
        port = None if why else GRPC_PORT
    elif port is not None and grpc_api.missing():
        raise ValueError(f"--port {port}: {grpc_api.missing()}")
    if port is None and rest_off:
        raise ValueError("nothing to serve on: --rest_api_port 0 turns REST off, and no gRPC"
                         + (f": {why}" if why else ""))
    if why:
        log.warning("tfxla serve: REST only, no gRPC on port %d: %s", GRPC_PORT, why)
    grpc_port = None if port is None else _port(port)
    rest_sock = None if rest_off else bind(host, _port(rest_api_port))  # first: a busy port fails fast
    try:
        core = make_core(configs, serve_options, file_system_poll_wait_seconds)
    except BaseException:
        if rest_sock is not None:
            rest_sock.close()
        raise
    if rest_sock is not None:
        rest_sock.listen(1024)  # clients are refused until the models are loaded, then queue until served
    try:
        status = asyncio.run(_run(core, host, rest_sock, grpc_port, limits, shutdown_timeout_s))
    finally:
        if rest_sock is not None:
            rest_sock.close()
    if status == 0:
        log.info("tfxla serve: stopped")
    return status
