"""Lowering a traced ``tf.function`` (a ConcreteFunction) as a whole: its placeholders become
parameters, its outputs the ROOT tuple, and each op's Python creation site its metadata."""

from __future__ import annotations

import os
from typing import Any

from hlo.ir import HloModule
from hlo.lowering.graph import InputSpec, lower_graph


def python_sources(graph: Any, prefix: str = "") -> dict[str, tuple[str, int]]:  # a tf.Graph
    """node name -> (file, line) of the innermost frame outside TensorFlow/Keras that created it; nodes of
    the functions the graph calls (cond branches, loop bodies, nested tf.functions) as ``"<function>::<node>"``."""
    import tensorflow as tf

    skip = tuple(p for p in (_package_dir("tensorflow"), _package_dir("keras"), _package_dir("tf_keras")) if p)
    # Our API traces on the user's behalf: nodes it creates are attributed to the user's frame.
    api = _package_dir("tfxla_plugin")
    skip += tuple(os.path.join(api, f) for f in ("api.py", "compiled_graph.py", "commands" + os.sep)) if api else ()
    out: dict[str, tuple[str, int]] = {}
    for op in graph.get_operations():
        frames = op.traceback or []
        for frame in reversed(frames):
            if not frame.filename.startswith(skip) and not frame.filename.startswith("<"):
                out[prefix + op.name] = (frame.filename, frame.lineno)
                break
    if not prefix:  # every function called, at any depth (TF keeps them in each graph's _functions)
        work, seen = [graph], set()
        while work:
            for fname, fn in getattr(work.pop(), "_functions", {}).items():
                traced = getattr(fn, "_cached_graph", None)  # fn.graph would rebuild a graph without user frames
                if fname not in seen and traced is not None:
                    seen.add(fname)
                    work.append(traced)
                    out.update(python_sources(traced, f"{fname}::"))
    return out


def _package_dir(name: str) -> str | None:
    import importlib.util

    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else None


def lower_concrete_function(cf: Any, name: str | None = None) -> HloModule:  # a ConcreteFunction
    """Lower every op of a ConcreteFunction (captured inputs included, as trailing parameters)."""
    graph = cf.graph
    inputs = [InputSpec(t.name, t.dtype.as_datatype_enum, tuple(t.shape.as_list())) for t in graph.inputs]
    for spec in inputs:
        if any(d is None for d in spec.dims):
            raise ValueError(f"input {spec.tensor} has unknown dims {spec.dims}; lowering needs static shapes")
    outputs = [t.name for t in graph.outputs]
    default = cf.name.decode() if isinstance(cf.name, bytes) else str(cf.name)
    return lower_graph(graph.as_graph_def(), inputs, outputs, name=name or default,
                       sources=python_sources(graph))
