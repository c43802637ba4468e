"""TF's remapper on what a graph the hook returns keeps in TensorFlow.

While the switch is on, TF's remapper is off (``hook/__init__``): the hook must see ``MatMul``/``BiasAdd``/
``Relu``, not the ``_FusedMatMul`` the remapper makes of them (docs/hook.md, "Fused ops"). What the hook
leaves in TF would then run unfused, slower than TF without the hook: a graph left alone, and the nodes
of a rewritten graph outside its clusters (a ``fit`` step traced for a ``None`` batch keeps its forward
and backward pass in TF). So the callback runs the remapper itself on the graph it returns
(``fused``): Grappler's ``OptimizeGraph`` with the remapper alone (no other optimizer, no pruning, no
plugin, so not this hook), on a virtual cluster of the graph's CPU device, the ``_Arg``/``_Retval``
nodes and Grappler's preserved nodes kept. What stays in TF gets TF's own fusions, as without the hook;
launch nodes are ops the remapper does not know and stay as they are.

Only a graph with a node the remapper fuses from (``FUSED_FROM``: a contraction, a bias add, a batch
norm) is given to it. It never raises: a failure leaves the graph as it is (one DEBUG line).
"""

from __future__ import annotations

import logging
from typing import Sequence

log = logging.getLogger("tfxla_plugin")
FUSED_FROM = frozenset({"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2", "BiasAdd",
                        "FusedBatchNorm", "FusedBatchNormV3"})
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
_OFF = ("layout_optimizer", "constant_folding", "shape_optimization", "arithmetic_optimization",
        "dependency_optimization", "loop_optimization", "function_optimization", "debug_stripper",
        "scoped_allocator_optimization", "pin_to_host_optimization", "implementation_selector",
        "auto_mixed_precision", "auto_mixed_precision_onednn_bfloat16", "common_subgraph_elimination",
        "use_plugin_optimizers")


def _config():
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    config = config_pb2.ConfigProto()
    options = config.graph_options.rewrite_options
    options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    options.min_graph_nodes = -1
    options.disable_model_pruning = True
    options.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
    for name in _OFF:
        setattr(options, name, rewriter_config_pb2.RewriterConfig.OFF)
    options.remapping = rewriter_config_pb2.RewriterConfig.ON
    return config


def fused(graph_def, preserve: Sequence[str]):
    """``graph_def`` as TF's remapper leaves it (a new GraphDef), or None: nothing it fuses from, no change,
    or a failure. ``preserve``: the nodes Grappler must keep (with every ``_Arg`` and ``_Retval``)."""
    if not any(n.op in FUSED_FROM for n in graph_def.node):
        return None
    try:
        out = _run_remapper(graph_def, preserve)
    except Exception as e:  # noqa: BLE001  (the graph runs unfused, as it would without this step)
        log.debug("tfxla hook: TF's remapper failed on a graph of %d nodes: %s: %s", len(graph_def.node),
                  type(e).__name__, e)
        return None
    before = sorted(n.op for n in graph_def.node)
    return out if sorted(n.op for n in out.node) != before else None


def _run_remapper(graph_def, preserve: Sequence[str]):
    from tensorflow.core.protobuf import device_properties_pb2, meta_graph_pb2
    from tensorflow.python.grappler import cluster as gcluster
    from tensorflow.python.grappler import tf_optimizer

    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph_def)
    keep = dict.fromkeys([*preserve, *(n.name for n in graph_def.node if n.op in ("_Arg", "_Retval"))])
    meta.collection_def["train_op"].node_list.value.extend(keep)  # Grappler's fetches: kept, with their names
    device = next((n.device for n in graph_def.node if "CPU" in n.device), CPU)
    named = device_properties_pb2.NamedDevice(name=device)
    named.properties.type = "CPU"
    cluster = gcluster.Cluster(devices=[named])  # virtual: no session, no devices provisioned
    try:
        return tf_optimizer.OptimizeGraph(_config(), meta, verbose=False, cluster=cluster)
    finally:
        cluster.Shutdown()


__all__ = ["FUSED_FROM", "fused"]
