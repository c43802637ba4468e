"""The inference engines TF users switch to for speed, as ``bench.function_bench`` columns.

One adapter per engine in ``ENGINES``: its column name, the module whose presence makes it available
(``pip install -e .[bench]``), and ``prepare(case, graph)`` that converts a row's function and returns
a ``Prepared``: a no-argument call with inputs and outputs bound once (what each engine's own
performance guide advises for latency; the call owns the host arrays its inputs share memory with:
OpenVINO's shared tensors do not keep them alive), a way to read the outputs of the last call, and the seconds
spent converting and compiling. Both engines get the function's concrete graph with its variables
frozen to their current values, so only inference rows are measured: ``skip_reason`` names the rows
they cannot run (a training step writes variables; a converted graph cannot).

- OpenVINO: ``openvino.convert_model`` of the concrete function, ``Core.compile_model(model, "CPU")``
  with ``PERFORMANCE_HINT=LATENCY`` and ``INFERENCE_PRECISION_HINT=f32`` (its CPU plugin defaults to
  bf16 where the CPU has bf16 dot products; this table compares float32), one ``InferRequest`` with
  its input tensors set once, ``infer(share_outputs=True)`` (no copy of the outputs).
- ONNX Runtime: ``tf2onnx.convert.from_function`` (opset ``ONNX_OPSET``), an ``InferenceSession``
  on the CPU execution provider with the default graph optimizations (all) and
  ``intra_op_num_threads`` = the machine's cores, and an ``IOBinding`` with input and output
  ``OrtValue``s bound once, run by ``run_with_iobinding``.
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tensorflow as tf

from bench.models import Case

ONNX_OPSET = 17


@dataclass(frozen=True)
class Prepared:
    call: Callable[[], None]  # one inference on the bound inputs
    outputs: Callable[[], list[np.ndarray]]  # the outputs of the last call, in the function's order
    compile_s: float  # conversion + compilation + first call


@dataclass(frozen=True)
class Engine:
    name: str  # the row key and JSON key
    title: str  # the column heading
    modules: tuple[str, ...]  # all installed: the engine is available
    prepare: Callable[[Case, Callable], Prepared]  # (case, its tf.function) -> Prepared

    def available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.modules)


def skip_reason(case: Case) -> str | None:
    """Why the engines do not run ``case`` (None: they do)."""
    if case.reset is not None or case.state:
        return "a training step: it writes variables, and a converted graph has them frozen as constants"
    return None


def _host_arrays(case: Case) -> list[np.ndarray]:
    """The case's arguments as C-contiguous NumPy arrays of their own shape (0-d stays 0-d)."""
    return [np.array(np.asarray(a), order="C", copy=True) for a in case.args]


def _specs(case: Case) -> list[tf.TensorSpec]:
    return [tf.TensorSpec(a.shape, a.dtype) for a in case.args]


class _OpenVinoCall:
    """One inference on the request's input tensors; owns the arrays whose memory those tensors share."""

    __slots__ = ("request", "inputs")

    def __init__(self, request, inputs: list[np.ndarray]):
        self.request, self.inputs = request, inputs

    def __call__(self) -> None:
        self.request.infer(share_outputs=True)


class _OnnxRuntimeCall:
    """One run on the bound OrtValues; owns the arrays whose memory the input OrtValues share."""

    __slots__ = ("session", "binding", "inputs")

    def __init__(self, session, binding, inputs: list[np.ndarray]):
        self.session, self.binding, self.inputs = session, binding, inputs

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.binding)


def _openvino(case: Case, graph: Callable) -> Prepared:
    import openvino as ov

    start = time.perf_counter()
    model = ov.convert_model(graph.get_concrete_function(*_specs(case)))
    compiled = ov.Core().compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY",
                                                      "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    arrays = _host_arrays(case)
    for k, a in enumerate(arrays):
        request.set_input_tensor(k, ov.Tensor(a, shared_memory=True))
    call = _OpenVinoCall(request, arrays)
    call()
    compile_s = time.perf_counter() - start

    def outputs() -> list[np.ndarray]:
        return [np.array(request.get_output_tensor(k).data) for k in range(len(compiled.outputs))]

    return Prepared(call, outputs, compile_s)


def _onnxruntime(case: Case, graph: Callable) -> Prepared:
    import onnxruntime as ort
    import tf2onnx

    start = time.perf_counter()
    proto, _ = tf2onnx.convert.from_function(graph, input_signature=_specs(case), opset=ONNX_OPSET)
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    arrays = _host_arrays(case)
    for spec, a in zip(session.get_inputs(), arrays):
        binding.bind_ortvalue_input(spec.name, ort.OrtValue.ortvalue_from_numpy(a))
    for spec in session.get_outputs():
        binding.bind_output(spec.name, "cpu")
    session.run_with_iobinding(binding)  # ORT allocates the outputs once; bind those from now on
    for spec, value in zip(session.get_outputs(), binding.get_outputs()):
        binding.bind_ortvalue_output(spec.name, value)
    call = _OnnxRuntimeCall(session, binding, arrays)
    call()
    compile_s = time.perf_counter() - start

    def outputs() -> list[np.ndarray]:
        return [np.array(v.numpy()) for v in binding.get_outputs()]

    return Prepared(call, outputs, compile_s)


ENGINES: tuple[Engine, ...] = (
    Engine("openvino", "OpenVINO", ("openvino",), _openvino),
    Engine("onnxruntime", "ONNX RT", ("onnxruntime", "tf2onnx", "onnx"), _onnxruntime),
)


def available() -> list[Engine]:
    """The engines installed here."""
    return [e for e in ENGINES if e.available()]
