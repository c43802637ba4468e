"""The ASGI application: TF Serving's REST routes over one ``ServedModel`` (served as version 1).

Routes (``[/versions/1]`` may follow the model name everywhere):
  GET  /v1/models/NAME             status      {"model_version_status": [...]}
  GET  /v1/models/NAME/metadata    signatures  {"model_spec": ..., "metadata": {"signature_def": ...}}
  POST /v1/models/NAME:predict     predict     row or columnar format (``codec``)
  GET  /v1/models/NAME/stats       tfxla's own counters (requests, batching, the hook's with --jit),
                                   not part of TF Serving
Every failure is ``{"error": "..."}``: 404 unknown model/version/path, 405 wrong method, 400 bad
request (names the input, key or signature), 413 body over ``max_request_bytes``, 501 classify /
regress, 504 past ``request_timeout_s``, 500 model failure. JSON parsing and encoding run in
Starlette's thread pool, signature calls in a pool of ``num_workers`` threads, so the event loop
never blocks on a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tfxla_plugin.serving.batching import Batcher, BatchOptions
from tfxla_plugin.serving.codec import RequestError, bad, encode_predict, parse_predict
from tfxla_plugin.serving.model import ServedModel

log = logging.getLogger("tfxla_plugin.serving")

# NAME[/versions/V | /labels/L][:verb | /metadata | /stats]
_MODEL_PATH = re.compile(r"(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
                         r"(?::(?P<verb>[^/:]+)|/(?P<sub>metadata|stats))?")
# TF errors that mean "the caller's inputs were wrong" rather than "the model failed".
_CLIENT_ERRORS = {"InvalidArgumentError": 400, "OutOfRangeError": 400}
_DRAIN_LIMIT = 64 << 20  # bytes of an oversized body read (and dropped) so the 413 reaches the client


@dataclass(frozen=True)
class ServeOptions:
    tag_set: str = "serve"
    batching: bool = False
    max_batch_size: int = 32
    batch_timeout_micros: int = 2000
    num_workers: int | None = None  # None: min(4, CPU count)
    max_request_bytes: int = 64 << 20
    request_timeout_s: float = 60.0
    inter_op_threads: int | None = None  # None: TF's default (model.inter_op_threads_for)
    jit: bool = False  # the Grappler hook on before the model loads (model.ServedModel)

    def __post_init__(self):
        if self.num_workers is not None and self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1, got {self.max_request_bytes}")
        if self.inter_op_threads is not None and self.inter_op_threads < 0:
            raise ValueError(f"inter_op_threads must be >= 0, got {self.inter_op_threads}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        BatchOptions(self.max_batch_size, self.batch_timeout_micros)  # validates them

    @property
    def workers(self) -> int:
        return self.num_workers or min(4, os.cpu_count() or 1)


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


_TF_NOISE = ("Graph execution error:", "Detected at node", "<stack traces unavailable>")


def _model_error(e: Exception) -> RequestError:
    # TF's text: a header, a Python traceback (indented) and node names (tab-indented) around the
    # message lines; keep only the message lines.
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln[0].isspace() and not ln.startswith(_TF_NOISE)]
    text = " ".join(lines)[:2000] or str(e)[:2000]
    kind = type(e).__name__
    return RequestError(_CLIENT_ERRORS.get(kind, 500), f"model execution failed: {kind}: {text}")


def _jit_json(model: ServedModel) -> dict | None:
    """The hook's ``HookStats`` as JSON, with the input shapes traced per signature (None: no ``--jit``)."""
    stats = model.jit_stats()
    if stats is None:
        return None
    return {**vars(stats), "seconds_compiling": round(stats.seconds_compiling, 3),
            "left_alone": dict(stats.left_alone),
            "shapes": {name: sig.fn.shapes for name, sig in model.signatures.items()}}


class ServingState:
    """The model, options, worker pool, batcher and counters behind one app."""

    def __init__(self, model: ServedModel, model_name: str, options: ServeOptions):
        self.model, self.model_name, self.options = model, model_name, options
        self._pool: ThreadPoolExecutor | None = None
        self.batcher = (Batcher(self._run, BatchOptions(options.max_batch_size, options.batch_timeout_micros))
                        if options.batching else None)
        self.requests = 0
        self.errors = 0

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.options.workers, thread_name_prefix="tfxla-serve")
        return self._pool

    async def _run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool(), self.model.run, signature, inputs)

    async def shutdown(self) -> None:
        if self.batcher is not None:
            await self.batcher.drain()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # ---- routes ---------------------------------------------------------------------------------

    def status(self) -> dict:
        return {"model_version_status": [{"version": str(self.model.version), "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}]}

    def metadata(self) -> dict:
        defs = self.model.signature_defs or {
            s.name: {"inputs": {k: {"dtype": v.dtype, "shape": v.shape_text()} for k, v in s.inputs.items()},
                     "outputs": {k: {"dtype": v.dtype, "shape": v.shape_text()} for k, v in s.outputs.items()},
                     "method_name": "tensorflow/serving/predict"}
            for s in self.model.signatures.values()}
        return {"model_spec": {"name": self.model_name, "signature_name": "", "version": str(self.model.version)},
                "metadata": {"signature_def": {"signature_def": defs}}}

    def stats(self) -> dict:
        return {"requests": self.requests, "errors": self.errors, "num_workers": self.options.workers,
                "batching": self.batcher.stats.as_dict() if self.batcher else None,
                "wrapped": self.model.manifest is not None, "jit": _jit_json(self.model)}

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

    async def predict(self, request: Request) -> Response:
        body = await self.read_body(request)
        parsed = await run_in_threadpool(lambda: parse_predict(_decode(body), self.model.signatures))
        sig = parsed.signature.name
        try:
            if self.batcher is not None:
                outputs = await self.batcher.submit(sig, parsed.inputs)
            else:
                outputs = await self._run(sig, parsed.inputs)
        except Exception as e:  # noqa: BLE001  (any model failure becomes an error answer)
            log.warning("model %s signature %s failed: %s", self.model_name, sig, e)
            raise _model_error(e) from None
        payload = await run_in_threadpool(lambda: _json_bytes(encode_predict(parsed.format, outputs)))
        return Response(payload, media_type="application/json")

    async def dispatch(self, request: Request) -> Response:
        m = _MODEL_PATH.fullmatch(request.path_params["path"])
        if m is None:
            raise RequestError(404, f"no such resource: {request.url.path}")
        name, version, label, verb, sub = m.group("name", "version", "label", "verb", "sub")
        if name != self.model_name:
            spec = f"Specific({name}, {version})" if version else f"Latest({name})"
            raise RequestError(404, f"Servable not found for request: {spec}")
        if version is not None and version != str(self.model.version):
            raise RequestError(404, f"Servable not found for request: Specific({name}, {version}); "
                                    f"this server serves version {self.model.version}")
        if label is not None:
            raise RequestError(404, f"Servable not found for request: no version labelled '{label}' "
                                    f"(labels are not supported)")
        if verb is not None:
            if request.method != "POST":
                raise RequestError(405, f"':{verb}' takes POST, not {request.method}")
            if verb == "predict":
                return await self.predict(request)
            if verb in ("classify", "regress"):
                raise RequestError(501, f"':{verb}' is not supported by tfxla serve (tf.Example inputs); "
                                        "use ':predict'")
            raise RequestError(404, f"unknown method ':{verb}'; this server supports ':predict'")
        if request.method != "GET":
            raise RequestError(405, f"{request.url.path} takes GET, not {request.method}")
        return answer({None: self.status, "metadata": self.metadata, "stats": self.stats}[sub]())

    async def endpoint(self, request: Request) -> Response:
        is_predict = request.method == "POST"
        if is_predict:
            self.requests += 1
        try:
            return await asyncio.wait_for(self.dispatch(request), self.options.request_timeout_s)
        except RequestError as e:
            failure = (e.status, e.message)
        except asyncio.TimeoutError:
            failure = (504, f"request timed out after {self.options.request_timeout_s:g} s")
        except ClientDisconnect:
            failure = (400, "the client disconnected before sending the whole body")
        except Exception as e:  # noqa: BLE001  (never crash a connection: answer 500 and log it)
            log.exception("internal error on %s %s", request.method, request.url.path)
            failure = (500, f"internal error: {type(e).__name__}: {e}")
        if is_predict:
            self.errors += 1
        return error(*failure)


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


def build_app(model: ServedModel, model_name: str, options: ServeOptions = ServeOptions()) -> Starlette:
    """The app for an already loaded model (``make_app`` loads it first)."""
    if not model_name or "/" in model_name or ":" in model_name:
        raise ValueError(f"invalid model name {model_name!r} (must be non-empty, without '/' or ':')")
    state = ServingState(model, model_name, options)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await state.shutdown()

    app = Starlette(
        routes=[Route("/v1/models/{path:path}", state.endpoint, methods=["GET", "POST"])],
        middleware=[Middleware(_AccessLog)],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.tfxla = state
    return app


def make_app(model_dir, model_name: str, *, tag_set: str = "serve", batching: bool = False,
             max_batch_size: int = 32, batch_timeout_micros: int = 2000, num_workers: int | None = None,
             max_request_bytes: int = 64 << 20, request_timeout_s: float = 60.0,
             inter_op_threads: int | None = None, jit: bool = False) -> Starlette:
    """Loads the SavedModel at ``model_dir`` and returns the ASGI app serving it as ``model_name``.

    ``jit=True`` turns the process-wide Grappler hook on first (``tfxla_plugin.enable()``; it stays on)
    so the signatures run tfxla's kernels, compiled at their first call.

    Raises ``model.ModelLoadError`` when the directory is not a loadable SavedModel and
    ``ValueError`` for bad options.
    """
    options = ServeOptions(tag_set=tag_set, batching=batching, max_batch_size=max_batch_size,
                           batch_timeout_micros=batch_timeout_micros, num_workers=num_workers,
                           max_request_bytes=max_request_bytes, request_timeout_s=request_timeout_s,
                           inter_op_threads=inter_op_threads, jit=jit)
    return build_app(ServedModel(model_dir, tag_set, inter_op_threads, jit=jit), model_name, options)
