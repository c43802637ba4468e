"""The serving core both APIs (REST: ``app``, gRPC: ``grpc_api``) answer through: options, pool, batchers, counters.

A request acquires a ``manager.Servable`` (a model version) from the ``ModelManager`` for as long as it
runs, and its signature call runs through that version's ``Batcher`` (``--enable_batching``) or
directly in the pool of ``num_workers`` threads, off the event loop. Model failures become a
``RequestError`` (400 for TF's "bad input" errors, else 500) with TF's message lines only.
``CODES`` names each HTTP status as the gRPC / TF error code both APIs and the metrics use.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from tfxla_plugin.serving.batching import Batcher, BatchOptions, QueueFull
from tfxla_plugin.serving.codec import RequestError
from tfxla_plugin.serving.manager import ModelManager, Servable
from tfxla_plugin.serving.metrics import Metrics

log = logging.getLogger("tfxla_plugin.serving")

# HTTP status -> the TF / gRPC error code name (TF Serving's REST answers use the same mapping).
CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED",
         413: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE",
         504: "DEADLINE_EXCEEDED"}
# TF errors that mean "the caller's inputs were wrong" rather than "the model failed".
_CLIENT_ERRORS = {"InvalidArgumentError": 400, "OutOfRangeError": 400}
_TF_NOISE = ("Graph execution error:", "Detected at node", "<stack traces unavailable>")


@dataclass(frozen=True)
class ServeOptions:
    tag_set: str = "serve"
    batching: bool = False
    max_batch_size: int = 32
    batch_timeout_micros: int = 2000
    max_enqueued_batches: int | None = None
    num_batch_threads: int | None = None
    allowed_batch_sizes: tuple[int, ...] = ()
    num_workers: int | None = None  # None: min(4, CPU count)
    max_request_bytes: int = 64 << 20
    request_timeout_s: float = 60.0
    inter_op_threads: int | None = None  # None: TF's default (model.inter_op_threads_for)
    jit: bool = False  # the Grappler hook on before the model loads (model.ServedModel)
    prometheus_path: str | None = None  # --monitoring_config_file: where the metrics are served

    def __post_init__(self):
        if self.num_workers is not None and self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")
        if self.max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1, got {self.max_request_bytes}")
        if self.inter_op_threads is not None and self.inter_op_threads < 0:
            raise ValueError(f"inter_op_threads must be >= 0, got {self.inter_op_threads}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        self.batch_options()  # validates them

    @classmethod
    def of(cls, **options: Any) -> "ServeOptions":
        """The options from keyword arguments; an unknown one is a ``TypeError`` naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown serving option(s): {', '.join(unknown)}")
        if "allowed_batch_sizes" in options:
            options["allowed_batch_sizes"] = tuple(options["allowed_batch_sizes"])
        return cls(**options)

    def batch_options(self) -> BatchOptions:
        return BatchOptions(self.max_batch_size, self.batch_timeout_micros, self.max_enqueued_batches,
                            self.num_batch_threads, self.allowed_batch_sizes)

    @property
    def workers(self) -> int:
        return self.num_workers or min(4, os.cpu_count() or 1)


def model_error(e: Exception) -> RequestError:
    """A model failure as the request's error: TF's message lines, without its traceback and node names."""
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln[0].isspace() and not ln.startswith(_TF_NOISE)]
    text = " ".join(lines)[:2000] or str(e)[:2000]
    kind = type(e).__name__
    return RequestError(_CLIENT_ERRORS.get(kind, 500), f"model execution failed: {kind}: {text}")


def _jit_json(model) -> dict | None:
    """The hook's ``HookStats`` as JSON, with the input shapes traced per signature (None: no ``--jit``)."""
    stats = model.jit_stats()
    if stats is None:
        return None
    return {**vars(stats), "seconds_compiling": round(stats.seconds_compiling, 3),
            "left_alone": dict(stats.left_alone),
            "shapes": {name: sig.fn.shapes for name, sig in model.signatures.items()}}


class ServingCore:
    """The manager, options, worker pool, per-version batchers, counters and metrics behind both APIs."""

    def __init__(self, manager: ModelManager, options: ServeOptions):
        self.manager, self.options = manager, options
        self.metrics = Metrics() if options.prometheus_path else None
        self._pool: ThreadPoolExecutor | None = None
        self.counts = {name: {"requests": 0, "errors": 0} for name in manager.names}

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.options.workers, thread_name_prefix="tfxla-serve")
        return self._pool

    def _batcher(self, servable: Servable) -> Batcher | None:
        if not self.options.batching:
            return None
        batcher = servable.extra.get("batcher")
        if batcher is None:
            async def run(signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
                return await self._call(servable, signature, inputs)

            on_call = (lambda rows: self.metrics.batch(servable.name, rows)) if self.metrics else None
            batcher = servable.extra["batcher"] = Batcher(run, self.options.batch_options(), on_call)
        return batcher

    async def _call(self, servable: Servable, signature: str, inputs: Mapping[str, np.ndarray]) -> dict:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool(), servable.model.run, signature, inputs)

    async def predict(self, servable: Servable, signature: str, inputs: Mapping[str, np.ndarray]) -> dict:
        """The outputs of ``signature`` (checked inputs); model failures raised as ``RequestError``."""
        batcher = self._batcher(servable)
        try:
            if batcher is not None:
                return await batcher.submit(signature, inputs)
            return await self._call(servable, signature, inputs)
        except QueueFull as e:
            raise RequestError(503, str(e)) from None
        except Exception as e:  # noqa: BLE001  (any model failure becomes an error answer)
            log.warning("model %s version %d signature %s failed: %s", servable.name, servable.version, signature, e)
            raise model_error(e) from None

    def begin(self, model_name: str, api: str) -> float:
        """Counts a request as it arrives (the /stats ``requests`` of predicts); returns its start time."""
        if api == "predict" and model_name in self.counts:
            self.counts[model_name]["requests"] += 1
        return time.perf_counter()

    def finish(self, model_name: str, api: str, entrypoint: str, status: int, started: float) -> None:
        """Records how a request ended (the /stats ``errors`` of predicts, and the metrics)."""
        if api == "predict" and model_name in self.counts:
            self.counts[model_name]["errors"] += status != 200
        if self.metrics is not None:
            self.metrics.request(model_name if model_name in self.counts else "", api, entrypoint,
                                 CODES.get(status, "UNKNOWN"), time.perf_counter() - started)

    # ---- answers shared by both APIs -------------------------------------------------------------

    def metadata_json(self, servable: Servable) -> dict:
        """TF Serving's GetModelMetadataResponse in its JSON form (REST ``/metadata``)."""
        model = servable.model
        defs = model.signature_defs or {
            s.name: {"inputs": {k: {"dtype": v.dtype, "shape": v.shape_text()} for k, v in s.inputs.items()},
                     "outputs": {k: {"dtype": v.dtype, "shape": v.shape_text()} for k, v in s.outputs.items()},
                     "method_name": "tensorflow/serving/predict"}
            for s in model.signatures.values()}
        return {"model_spec": {"name": servable.name, "signature_name": "", "version": str(servable.version)},
                "metadata": {"signature_def": {"signature_def": defs}}}

    def status_json(self, name: str, version: int | None, label: str | None) -> dict:
        return {"model_version_status": [s.as_json() for s in self.manager.statuses(name, version, label)]}

    def stats(self, servable: Servable) -> dict:
        batcher = servable.extra.get("batcher")
        return {**self.counts[servable.name], "version": servable.version, "num_workers": self.options.workers,
                "batching": batcher.stats.as_dict() if batcher else None,
                "wrapped": servable.model.manifest is not None, "jit": _jit_json(servable.model)}

    async def shutdown(self) -> None:
        """Runs what the batchers hold and closes the pool (idempotent)."""
        for servable in self.manager.live():
            batcher = servable.extra.get("batcher")
            if batcher is not None:
                await batcher.drain()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
