"""The gradient of ``TfxlaLaunch``: differentiate the original cluster subgraph with TensorFlow.

Everything the gradient needs is on the launch op itself: ``cluster_graph`` (the cluster's GraphDef,
serialized) and ``cluster_io`` (its input and output tensor names, JSON), the ``GRADIENT_ATTRS`` that
``cluster_attrs`` builds. A launch node in a graph carries them; an eager launch passes them only where
the op is recorded (on a tape, or into a graph being built), never on the quick path
(``eager_launch.EagerLaunch``). So no table maps kernels to graphs: two clusters that compile to the
same kernel (``tf.stop_gradient(x) * y`` and ``x * y``) keep their own gradients, and compiling a
function again or in another graph changes nothing here.

The differentiating ``tf.function`` of a cluster is cached by the cluster's content (a bounded cache:
correctness never depends on it).
"""

from __future__ import annotations

import functools
import json

import tensorflow as tf

GRADIENT_ATTRS = ("cluster_graph", "cluster_io")
_MAX_CACHED = 64  # differentiating functions kept (one per distinct cluster)


def cluster_attrs(spec) -> dict[str, bytes | str]:
    """The ``GRADIENT_ATTRS`` of the launch of ``spec`` (a ``graph_passes`` ``ClusterSpec``)."""
    return {"cluster_graph": spec.graph_def.SerializeToString(),
            "cluster_io": json.dumps({"inputs": [p.tensor for p in spec.inputs], "outputs": spec.output_tensors()})}


def _cluster_of(op) -> tuple[bytes, tuple[str, ...], tuple[str, ...]]:
    """(graph, input tensors, output tensors) of the cluster that launch ``op`` runs, from its attrs."""
    graph, io = b"", None
    try:
        graph = op.get_attr("cluster_graph")
        io = json.loads(op.get_attr("cluster_io") or "null")
    except (KeyError, ValueError, TypeError):  # not set on this op
        pass
    if not graph or not io:
        raise LookupError(f"TfxlaLaunch {op.name}: no cluster graph to differentiate (the launch carries no "
                          f"{' / '.join(GRADIENT_ATTRS)} attrs: a batch-tiled cluster with several graphs, or a "
                          f"SavedModel wrapped without them)")
    return graph, tuple(io["inputs"]), tuple(io["outputs"])


@functools.lru_cache(maxsize=_MAX_CACHED)
def _grad_function(graph: bytes, inputs: tuple[str, ...], outputs: tuple[str, ...]):
    gd = tf.compat.v1.GraphDef.FromString(graph)

    def grads(ins, gys):
        # tf.gradients, not a tape: ops made by import_graph_def are not recorded on tapes.
        outs = tf.graph_util.import_graph_def(gd, input_map=dict(zip(inputs, ins)),
                                              return_elements=list(outputs), name="cluster")
        return tf.gradients(list(outs), list(ins), grad_ys=list(gys),
                            unconnected_gradients=tf.UnconnectedGradients.ZERO)

    return tf.function(grads, autograph=False)


@tf.RegisterGradient("TfxlaLaunch")
def _launch_gradient(op, *grads):
    graph, inputs, outputs = _cluster_of(op)
    ins = list(op.inputs)[1:]
    gys = [g if g is not None else tf.zeros_like(o) for g, o in zip(grads, op.outputs)]
    float_ins = [t.dtype.is_floating for t in ins]
    result = _grad_function(graph, inputs, outputs)(ins, gys)
    return [None] + [g if ok else None for g, ok in zip(result, float_ins)]
