"""The served model: a loaded SavedModel, its signatures as typed specs, and one way to call them.

Invariants: ``ServedModel.run`` takes NumPy arrays already checked against the signature
(``codec.to_array``) and returns NumPy arrays keyed by output name; it is thread safe (TF
executes ops with the GIL released, so a thread pool runs several calls at once).

``jit=True`` (``tfxla serve --jit``) turns the Grappler hook on (``tfxla_plugin.enable()``,
docs/hook.md) before the SavedModel is loaded, so TF hands each signature's graph to our compiler
when it first runs it, each signature traced per input shape (``PerShape``: the hook compiles static
shapes); ``jit_stats`` then reports what the hook did.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

MANIFEST = "tfxla_manifest.json"
log = logging.getLogger("tfxla_plugin.serving")


def inter_op_threads_for(model_dir: str | os.PathLike, requested: int | None) -> int | None:
    """TF's inter-op thread count to serve ``model_dir`` with: ``requested`` if given (0: TF's default),
    else None (leave TF's default), for a wrapped model as for any other. Kernels of a wrapped model run
    their parallel loops on one process-wide pool (docs/design.md §7), so nothing needs fewer inter-op
    threads than TF picks."""
    del model_dir
    if requested is not None and requested < 0:
        raise ValueError(f"inter_op_threads must be >= 0 (0: TensorFlow's default), got {requested}")
    return requested


def apply_inter_op_threads(threads: int | None) -> int:
    """Sets TF's inter-op thread count (None: leave it); returns the count in force (0: TF's default).
    Once TF's runtime has started the count can no longer change: that is logged, not raised."""
    import tensorflow as tf

    if threads is not None and threads != tf.config.threading.get_inter_op_parallelism_threads():
        try:
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError as e:  # TF already initialized in this process
            import logging

            logging.getLogger("tfxla.serve").warning(
                "cannot set TensorFlow's inter-op threads to %d here (%s); keeping %d", threads, e,
                tf.config.threading.get_inter_op_parallelism_threads())
    return tf.config.threading.get_inter_op_parallelism_threads()


class ModelLoadError(RuntimeError):
    """The directory is not a loadable SavedModel (message says which directory and why)."""


@dataclass(frozen=True)
class TensorInfo:
    """One named input or output of a signature: TF dtype name, NumPy dtype, shape (None = unknown)."""

    name: str
    dtype: str  # TF's name: "float32", "int64", "string", "bool", ...
    np_dtype: np.dtype
    shape: tuple[int | None, ...] | None  # None: unknown rank

    def shape_text(self) -> str:
        if self.shape is None:
            return "<unknown rank>"
        return "[" + ", ".join("None" if d is None else str(d) for d in self.shape) + "]"


@dataclass(frozen=True)
class Signature:
    """A callable serving signature with its inputs and outputs, both in sorted name order."""

    name: str
    inputs: Mapping[str, TensorInfo]
    outputs: Mapping[str, TensorInfo]
    fn: Callable[..., Mapping[str, Any]]


def _tensor_info(name: str, spec) -> TensorInfo:
    shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
    np_dtype = np.dtype(object) if spec.dtype.name == "string" else np.dtype(spec.dtype.as_numpy_dtype)
    return TensorInfo(name=name, dtype=spec.dtype.name, np_dtype=np_dtype, shape=shape)


def _signature(name: str, fn) -> Signature:
    _, kwargs = fn.structured_input_signature
    outputs = fn.structured_outputs
    if not isinstance(outputs, Mapping):  # a signature always returns a dict; be defensive
        outputs = {"output_0": outputs}
    return Signature(
        name=name,
        inputs={k: _tensor_info(k, kwargs[k]) for k in sorted(kwargs)},
        outputs={k: _tensor_info(k, outputs[k]) for k in sorted(outputs)},
        fn=fn,
    )


def _signature_def_protos(model_dir: Path, tags: tuple[str, ...]) -> dict:
    """The MetaGraphDef's ``signature_def`` map: name -> ``SignatureDef`` proto (what TF Serving's metadata shows)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((model_dir / "saved_model.pb").read_bytes())
    for meta_graph in saved.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return dict(sorted(meta_graph.signature_def.items()))
    return {}


def _read_manifest(model_dir: Path) -> dict | None:
    """The tfxla manifest of a wrapped model (None when the model is not wrapped)."""
    path = model_dir / "assets" / MANIFEST
    if not path.is_file():
        return None
    from tfxla_plugin.commands.show import SavedModelError, check_manifest

    try:
        manifest = json.loads(path.read_text())
        check_manifest(manifest, model_dir)
    except (OSError, ValueError, SavedModelError) as e:
        raise ModelLoadError(f"unreadable tfxla manifest {path}: {e}") from e
    return manifest


JIT_SHAPES = 16  # distinct input shapes per signature that --jit specializes (and compiles) a graph for


class PerShape:
    """A signature called through one ``tf.function`` trace per distinct set of input shapes (``--jit``).

    A serving signature usually has a ``None`` batch dim, and the hook compiles static shapes only
    (docs/hook.md, "Shapes"): the signature's own graph stays in TF. Traced per shape, the signature is
    inlined into a graph whose inputs have static shapes, which the hook compiles at its first call.
    The first ``limit`` shapes seen get a trace; calls with any other shape run the signature as
    loaded (in TF), so a client sending ever new batch sizes cannot make the server compile without end.
    """

    def __init__(self, fn, limit: int = JIT_SHAPES):
        import tensorflow as tf

        self._fn, self._limit = fn, limit
        self._traced = tf.function(lambda **kw: fn(**kw), autograph=False)
        self._shapes: set[tuple] = set()
        self._lock = threading.Lock()

    def __call__(self, **inputs):
        import tensorflow as tf

        key = tuple(sorted((name, np.shape(value)) for name, value in inputs.items()))
        with self._lock:
            if key not in self._shapes and len(self._shapes) < self._limit:
                self._shapes.add(key)
            traced = key in self._shapes
        if not traced:
            return self._fn(**inputs)
        return self._traced(**{name: tf.convert_to_tensor(value) for name, value in inputs.items()})

    @property
    def shapes(self) -> int:
        """How many shapes have a trace of their own."""
        return len(self._shapes)


class ServedModel:
    """A SavedModel loaded for serving as ``version``: signatures, metadata and the manifest if wrapped."""

    def __init__(self, model_dir: str | os.PathLike, tag_set: str = "serve", inter_op_threads: int | None = None,
                 jit: bool = False, version: int = 1):
        import tensorflow as tf

        import tfxla_plugin  # registers TfxlaLaunch before a wrapped model is loaded

        self.model_dir = Path(model_dir).resolve()
        self.version = version
        self.tags = tuple(t.strip() for t in tag_set.split(",") if t.strip())
        if not (self.model_dir / "saved_model.pb").is_file():
            raise ModelLoadError(f"{self.model_dir} is not a SavedModel directory (no saved_model.pb)")
        self.inter_op_threads = apply_inter_op_threads(inter_op_threads_for(self.model_dir, inter_op_threads))
        self.jit = jit or tfxla_plugin.is_enabled()  # on already: TFXLA_FLAGS=--auto_jit=1, or enable() earlier
        self._first_calls: set[str] = set()  # signatures called once (jit: the hook's stats logged after)
        self._lock = threading.Lock()
        if self.jit:  # before loading: the hook acts on graphs TF optimizes from now on
            if not tfxla_plugin.is_enabled():
                tfxla_plugin.enable()
            log.info("tfxla serve --jit: the Grappler hook is on: each signature's graph is compiled by "
                     "tfxla at its first call (kernels cached on disk), what cannot compile runs in TensorFlow")
        try:
            self._loaded = tf.saved_model.load(str(self.model_dir), tags=list(self.tags) or None)
        except Exception as e:  # noqa: BLE001  (TF raises many kinds; all mean "cannot serve this")
            raise ModelLoadError(f"cannot load the SavedModel {self.model_dir} (tags {self.tags}): {e}") from e
        self.signatures: dict[str, Signature] = {
            name: _signature(name, fn) for name, fn in sorted(self._loaded.signatures.items())
        }
        if self.jit:
            self.signatures = {name: replace(sig, fn=PerShape(sig.fn)) for name, sig in self.signatures.items()}
        if not self.signatures:
            raise ModelLoadError(f"the SavedModel {self.model_dir} has no serving signatures")
        self.signature_def_protos = _signature_def_protos(self.model_dir, self.tags)
        self.manifest = _read_manifest(self.model_dir)

    def run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Calls ``signature`` on checked inputs; returns every output as a NumPy array."""
        sig = self.signatures[signature]
        result = sig.fn(**inputs)
        outputs = {name: np.asarray(result[name].numpy()) for name in sig.outputs}
        if self.jit and signature not in self._first_calls:
            with self._lock:
                first = signature not in self._first_calls
                self._first_calls.add(signature)
            if first:
                log.info("tfxla serve --jit: after the first call of signature '%s': %s", signature, self.jit_stats())
        return outputs

    @functools.cached_property
    def signature_defs(self) -> dict:
        """The ``signature_def`` map as proto JSON (TF Serving's REST metadata); {} when the tags matched none."""
        from google.protobuf import json_format

        return {k: json_format.MessageToDict(v, preserving_proto_field_name=True)
                for k, v in self.signature_def_protos.items()}

    def jit_stats(self):
        """The hook's counters (``tfxla_plugin.stats()``, process-wide) with ``jit``, else None."""
        if not self.jit:
            return None
        import tfxla_plugin

        return tfxla_plugin.stats()
