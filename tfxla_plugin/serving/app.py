"""The ASGI application: TF Serving's REST routes over the ``core.ServingCore`` of one or more models.

Routes (``/versions/N`` or ``/labels/L`` may follow the model name everywhere; without, the newest
AVAILABLE version answers):
  GET  /v1/models/NAME             status      {"model_version_status": [...]}, every version known
  GET  /v1/models/NAME/metadata    signatures  {"model_spec": ..., "metadata": {"signature_def": ...}}
  POST /v1/models/NAME:predict     predict     row or columnar format (``codec``)
  GET  /v1/models/NAME/stats       tfxla's own counters (requests, batching, the hook's with --jit),
                                   not part of TF Serving
  GET  /monitoring/prometheus/metrics  Prometheus metrics (``metrics``), with --monitoring_config_file
Every failure is ``{"error": "..."}``: 404 unknown model/version/label/path, 405 wrong method, 400 bad
request (names the input, key or signature), 413 body over ``max_request_bytes``, 501 classify /
regress, 503 batch queue full, 504 past ``request_timeout_s``, 500 model failure. JSON parsing and
encoding run in Starlette's thread pool, signature calls in the core's pool, so the event loop never
blocks on a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tfxla_plugin.serving import config as serving_config
from tfxla_plugin.serving.codec import RequestError, bad, encode_predict, parse_predict
from tfxla_plugin.serving.core import ServeOptions, ServingCore
from tfxla_plugin.serving.manager import ModelManager
from tfxla_plugin.serving.model import ServedModel

log = logging.getLogger("tfxla_plugin.serving")

# NAME[/versions/V | /labels/L][:verb | /metadata | /stats]
_MODEL_PATH = re.compile(r"(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
                         r"(?::(?P<verb>[^/:]+)|/(?P<sub>metadata|stats))?")
_DRAIN_LIMIT = 64 << 20  # bytes of an oversized body read (and dropped) so the 413 reaches the client
_APIS = {None: "status", "metadata": "metadata", "stats": "stats"}


def _json_bytes(obj: Any) -> bytes:
    # TF Serving's JSON allows NaN and +-Infinity (Python's json reads and writes them).
    return json.dumps(obj, allow_nan=True, separators=(",", ":")).encode()


def answer(obj: Any, status: int = 200) -> Response:
    return Response(_json_bytes(obj), status_code=status, media_type="application/json")


def error(status: int, message: str) -> Response:
    return answer({"error": message}, status)


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise bad(f"malformed JSON body: {e}") from None


def _version(text: str | None, name: str) -> int | None:
    if text is None:
        return None
    if not text.isdigit():
        raise RequestError(404, f"Servable not found for request: Specific({name}, {text}): versions are numbers")
    return int(text)


class RestApi:
    """The REST routes over a ``ServingCore``."""

    def __init__(self, core: ServingCore):
        self.core, self.options = core, core.options

    async def read_body(self, request: Request) -> bytes:
        limit = self.options.max_request_bytes
        declared = request.headers.get("content-length", "")
        too_big = RequestError(413, f"request body over the limit of {limit} bytes (--max_request_bytes)")
        if declared.isdigit() and int(declared) > limit:
            await self._drain(request)
            raise too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                await self._drain(request)
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    async def _drain(request: Request) -> None:
        dropped = 0
        with contextlib.suppress(ClientDisconnect, RuntimeError):
            async for chunk in request.stream():
                dropped += len(chunk)
                if dropped > _DRAIN_LIMIT:
                    break

    async def predict(self, request: Request, name: str, version: int | None, label: str | None) -> Response:
        body = await self.read_body(request)
        with self.core.manager.acquire(name, version, label) as servable:
            parsed = await run_in_threadpool(lambda: parse_predict(_decode(body), servable.model.signatures))
            outputs = await self.core.predict(servable, parsed.signature.name, parsed.inputs)
        payload = await run_in_threadpool(lambda: _json_bytes(encode_predict(parsed.format, outputs)))
        return Response(payload, media_type="application/json")

    def get(self, sub: str | None, name: str, version: int | None, label: str | None) -> Response:
        if sub is None:
            return answer(self.core.status_json(name, version, label))
        with self.core.manager.acquire(name, version, label) as servable:
            return answer(self.core.metadata_json(servable) if sub == "metadata" else self.core.stats(servable))

    async def dispatch(self, request: Request, m: re.Match) -> Response:
        name, version_text, label, verb, sub = m.group("name", "version", "label", "verb", "sub")
        version = _version(version_text, name)
        if verb is not None:
            if request.method != "POST":
                raise RequestError(405, f"':{verb}' takes POST, not {request.method}")
            if verb == "predict":
                return await self.predict(request, name, version, label)
            if verb in ("classify", "regress"):
                raise RequestError(501, f"':{verb}' is not supported by tfxla serve (tf.Example inputs); "
                                        "use ':predict'")
            raise RequestError(404, f"unknown method ':{verb}'; this server supports ':predict'")
        if request.method != "GET":
            raise RequestError(405, f"{request.url.path} takes GET, not {request.method}")
        return self.get(sub, name, version, label)

    async def endpoint(self, request: Request) -> Response:
        m = _MODEL_PATH.fullmatch(request.path_params["path"])
        name = m.group("name") if m else ""
        api = "other" if m is None or m.group("verb") not in (None, "predict") else (
            "predict" if m.group("verb") else _APIS[m.group("sub")])
        started = self.core.begin(name, api)
        try:
            if m is None:
                raise RequestError(404, f"no such resource: {request.url.path}")
            response = await asyncio.wait_for(self.dispatch(request, m), self.options.request_timeout_s)
            self.core.finish(name, api, "REST", 200, started)
            return response
        except RequestError as e:
            failure = (e.status, e.message)
        except asyncio.TimeoutError:
            failure = (504, f"request timed out after {self.options.request_timeout_s:g} s")
        except ClientDisconnect:
            failure = (400, "the client disconnected before sending the whole body")
        except Exception as e:  # noqa: BLE001  (never crash a connection: answer 500 and log it)
            log.exception("internal error on %s %s", request.method, request.url.path)
            failure = (500, f"internal error: {type(e).__name__}: {e}")
        self.core.finish(name, api, "REST", failure[0], started)
        return error(*failure)

    async def prometheus(self, request: Request) -> Response:
        body, content_type = await run_in_threadpool(self.core.metrics.text)
        return Response(body, media_type=content_type)


class _AccessLog:
    """Pure ASGI middleware: one DEBUG line per request (method, path, status, milliseconds)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), [0]

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            log.debug("%s %s %d %.1f ms", scope["method"], scope["path"], status[0],
                      (time.perf_counter() - start) * 1e3)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error(500, f"internal error: {type(exc).__name__}: {exc}")


def build_app(core: ServingCore) -> Starlette:
    """The REST app over ``core`` (whose models are loaded: ``make_app``, ``server.serve``)."""
    rest = RestApi(core)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await core.shutdown()

    routes = [Route("/v1/models/{path:path}", rest.endpoint, methods=["GET", "POST"])]
    if core.options.prometheus_path:
        routes.append(Route(core.options.prometheus_path, rest.prometheus, methods=["GET"]))
    app = Starlette(
        routes=routes,
        middleware=[Middleware(_AccessLog)],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.tfxla = core
    return app


def loader(options: ServeOptions):
    """(directory, version) -> the ``ServedModel`` loaded with ``options`` (tags, threads, ``jit``)."""
    def load(path, version: int) -> ServedModel:
        return ServedModel(path, options.tag_set, options.inter_op_threads, jit=options.jit, version=version)

    return load


def make_core(configs: list[serving_config.ModelConfig], options: ServeOptions,
              poll_wait_s: float = 1.0) -> ServingCore:
    """The core serving ``configs``, their initial versions loaded (polling not started: ``manager.start()``).

    Raises the load error of an initial version (``model.ModelLoadError``) and ``ValueError`` for bad options."""
    manager = ModelManager(configs, loader(options), poll_wait_s)
    manager.load_initial()
    return ServingCore(manager, options)


def make_app(model_dir, model_name: str = "default", **options) -> Starlette:
    """Loads the SavedModel at ``model_dir`` and returns the ASGI app serving it as ``model_name``, version 1.

    ``options`` are ``core.ServeOptions``' fields (``batching``, ``max_batch_size``, ``num_workers``, ``jit``...).
    ``jit=True`` turns the process-wide Grappler hook on first (``tfxla_plugin.enable()``; it stays on)
    so the signatures run tfxla's kernels, compiled at their first call.

    Raises ``model.ModelLoadError`` when the directory is not a loadable SavedModel and
    ``ValueError`` for bad options.
    """
    serve_options = ServeOptions.of(**options)
    return build_app(make_core([serving_config.single_model(model_dir, model_name)], serve_options))
