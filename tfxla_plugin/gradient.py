"""The gradient of ``TfxlaLaunch``: differentiate the original cluster subgraph with TensorFlow.

The launch node carries its cluster's GraphDef (``cluster_graph``) and tensor names
(``cluster_io``); eager launches, which skip those large attributes for speed, are looked up by
``kernel_hash`` in a process-wide table filled when the cluster was compiled.
"""

from __future__ import annotations

import json

import tensorflow as tf

_CLUSTERS: dict[str, tuple[bytes, list[str], list[str]]] = {}  # kernel hash -> (graph, inputs, outputs)
_GRAD_FUNCTIONS: dict[tuple, object] = {}


def remember(kernel_hash: str, spec) -> None:
    _CLUSTERS[kernel_hash] = (spec.graph_def.SerializeToString(), [p.tensor for p in spec.inputs],
                              spec.output_tensors())


def _cluster_of(op) -> tuple[bytes, list[str], list[str]]:
    graph = b""
    io = None
    try:
        graph = op.get_attr("cluster_graph")
        io = json.loads(op.get_attr("cluster_io"))
    except (ValueError, TypeError):
        pass
    if graph and io:
        return graph, io["inputs"], io["outputs"]
    key = op.get_attr("kernel_hash")
    key = key.decode() if isinstance(key, bytes) else key
    if key not in _CLUSTERS:
        raise LookupError(f"TfxlaLaunch {op.name}: no cluster graph to differentiate (kernel {key})")
    return _CLUSTERS[key]


def _grad_function(graph: bytes, inputs: list[str], outputs: list[str]):
    key = (graph, tuple(inputs), tuple(outputs))
    fn = _GRAD_FUNCTIONS.get(key)
    if fn is None:
        gd = tf.compat.v1.GraphDef.FromString(graph)

        def grads(ins, gys):
            # tf.gradients, not a tape: ops made by import_graph_def are not recorded on tapes.
            outs = tf.graph_util.import_graph_def(gd, input_map=dict(zip(inputs, ins)),
                                                  return_elements=outputs, name="cluster")
            return tf.gradients(list(outs), list(ins), grad_ys=list(gys),
                                unconnected_gradients=tf.UnconnectedGradients.ZERO)

        fn = _GRAD_FUNCTIONS[key] = tf.function(grads, autograph=False)
    return fn


@tf.RegisterGradient("TfxlaLaunch")
def _launch_gradient(op, *grads):
    graph, inputs, outputs = _cluster_of(op)
    ins = list(op.inputs)[1:]
    gys = [g if g is not None else tf.zeros_like(o) for g, o in zip(grads, op.outputs)]
    float_ins = [t.dtype.is_floating for t in ins]
    result = _grad_function(graph, inputs, outputs)(ins, gys)
    return [None] + [g if ok else None for g, ok in zip(result, float_ins)]
