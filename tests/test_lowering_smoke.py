"""The lowering framework end to end on a few ops (the op sweep lives in test_lowering_ops_*)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering import LoweringError, UnsupportedOpError
from tests.lowering_harness import check_lowering, lower_fn


def test_unary_chain_matches_tf_and_carries_metadata() -> None:
    x = np.array([[-1.5, 0.0, 2.0], [np.nan, np.inf, -np.inf]], np.float32)
    module = check_lowering(lambda t: tf.exp(-tf.abs(tf.tanh(t))), x)
    for _, inst in module.instructions():
        if inst.opcode in (hlo.Opcode.TANH, hlo.Opcode.ABS, hlo.Opcode.NEGATE, hlo.Opcode.EXPONENTIAL):
            md = inst.metadata
            assert md.op_type in ("Tanh", "Abs", "Neg", "Exp") and md.op_name
            assert md.source_file == __file__, md


def test_unsupported_op_names_op_node_and_line() -> None:
    x = np.ones((2, 2), np.float32)
    with pytest.raises(UnsupportedOpError) as info:
        lower_fn(lambda t: tf.raw_ops.Dawsn(x=t), x)
    err = info.value
    assert err.op_type == "Dawsn" and "Dawsn" in str(err)
    assert err.source is not None and err.source[0] == __file__
    assert f"{__file__}:" in str(err)


def test_unsupported_dtype_names_dtype() -> None:
    x = np.ones((2,), np.complex64)
    with pytest.raises(UnsupportedOpError, match="Asinh does not support dtype complex64") as info:
        lower_fn(lambda t: tf.math.asinh(t), x)
    assert info.value.op_type == "Asinh" and info.value.dtype == "complex64"


def test_dangling_input_names_the_node() -> None:
    gd = tf.function(lambda t: tf.exp(t)).get_concrete_function(tf.TensorSpec([2], tf.float32)).graph.as_graph_def()
    for node in gd.node:
        if node.op == "Exp":
            node.input[0] = "missing_node:0"
    from hlo.lowering import InputSpec, lower_graph

    x_name = next(n.name for n in gd.node if n.op == "Placeholder")
    out = next(n.name for n in gd.node if n.op == "Identity")
    with pytest.raises(LoweringError, match="refers to node 'missing_node'"):
        lower_graph(gd, [InputSpec(f"{x_name}:0", 1, (2,))], [f"{out}:0"])
