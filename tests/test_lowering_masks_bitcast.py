"""MatrixBandPart and Bitcast against TF eager: bands with constant and run-time bounds (-1 keeps a
whole triangle), batched and non-square inputs, every width change of Bitcast, TF's errors; and the
Keras paths that emit them compiled with ``tfxla_plugin.function(jit_compile=True)``: a causal
MultiHeadAttention block and the sparse categorical accuracy metric."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from hlo.lowering import LoweringError
from tests.lowering_harness import check_lowering, lower_fn

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 3, 5, 4)).astype(np.float32)


@pytest.mark.parametrize("bounds", [(-1, 0), (0, -1), (1, 2), (0, 0), (-1, -1), (5, 4), (-7, 3)])
def test_band_part_with_constant_bounds(bounds) -> None:
    lower, upper = bounds
    check_lowering(lambda a: tf.linalg.band_part(a, lower, upper), X)


def test_band_part_with_run_time_bounds_and_other_dtypes() -> None:
    band = lambda a, lo, up: tf.linalg.band_part(a, lo, up)  # noqa: E731
    for lo, up in [(1, -1), (-1, 0), (2, 3)]:
        check_lowering(band, X, np.int64(lo), np.int64(up))
    check_lowering(band, X[0, 0] > 0, np.int32(0), np.int32(2))
    check_lowering(band, RNG.integers(-9, 9, (3, 6)).astype(np.int32), np.int32(1), np.int32(1))


def test_band_part_errors_name_the_node() -> None:
    with pytest.raises(LoweringError, match=r"MatrixBandPart.*num_lower must be negative or less or equal to "
                                            r"number of rows \(M\): 6"):
        lower_fn(lambda a: tf.linalg.band_part(a, 6, 0), X)


def test_causal_attention_block_compiled_matches_tf() -> None:
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, seed=0)
    norm = keras.layers.LayerNormalization()
    q = tf.constant(RNG.normal(size=(2, 7, 8)).astype(np.float32))

    def block(x):
        return norm(x + mha(x, x, use_causal_mask=True))
    want = block(q).numpy()
    got = tfxla_plugin.function(block, jit_compile=True)(q).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # causality: changing the last position changes no earlier output
    q2 = tf.concat([q[:, :-1], q[:, -1:] + 3.0], axis=1)
    got2 = tfxla_plugin.function(block, jit_compile=True)(q2).numpy()
    np.testing.assert_allclose(got2[:, :-1], got[:, :-1], rtol=1e-6, atol=1e-6)


BITS = np.array([[1.5, -0.0, np.inf], [np.nan, 3e-39, -7.25]], np.float32)


@pytest.mark.parametrize("to", [tf.int32, tf.uint32, tf.uint8, tf.int16, tf.float16, tf.bfloat16, tf.float32])
def test_bitcast_from_f32(to) -> None:
    check_lowering(lambda a: tf.bitcast(a, to), BITS)


@pytest.mark.parametrize("case", [(np.uint8, (2, 3, 4), tf.float32), (np.int16, (3, 4), tf.float64),
                                  (np.float64, (5,), tf.int64), (np.float64, (2, 2), tf.uint16),
                                  (np.int8, (2,), tf.float16), (np.uint16, (4, 2), tf.int32)],
                         ids=lambda c: str(c))
def test_bitcast_widths(case) -> None:
    dtype, shape, to = case
    x = RNG.integers(0, 2**15, shape).astype(dtype) if np.dtype(dtype).kind in "iu" else RNG.normal(size=shape)
    check_lowering(lambda a: tf.bitcast(a, to), x.astype(dtype))


def test_bitcast_errors_name_the_node() -> None:
    """TF's shape inference stops this graph being built, so the NodeDef is written by hand."""
    from hlo.lowering.graph import InputSpec, lower_graph

    gd = tf.compat.v1.GraphDef()
    node = gd.node.add(name="pack", op="Bitcast", input=["a"])
    node.attr["T"].type = tf.uint8.as_datatype_enum
    node.attr["type"].type = tf.float32.as_datatype_enum
    with pytest.raises(LoweringError, match=r"'pack'.*Cannot bitcast from uint8 to float32: shape \[2, 3\] "
                                            r"must end in a dimension of 4"):
        lower_graph(gd, [InputSpec("a:0", tf.uint8.as_datatype_enum, (2, 3))], ["pack:0"])


def test_sparse_categorical_accuracy_compiled_matches_tf() -> None:
    y = tf.constant([0.0, 1.0, 2.0, 1.0, 2.0])
    p = tf.constant(np.array([[0.9, 0.1, 0.0], [0.2, 0.5, 0.3], [np.nan, 0.1, 0.2], [0.3, -0.0, 0.0],
                              [0.1, 0.2, 0.7]], np.float32))
    acc = keras.metrics.sparse_categorical_accuracy
    np.testing.assert_array_equal(tfxla_plugin.function(acc, jit_compile=True)(y, p).numpy(), acc(y, p).numpy())


def test_ensure_shape_is_the_identity_or_tf_s_error() -> None:
    from hlo.lowering.graph import InputSpec, lower_graph

    x = RNG.normal(size=(2, 3)).astype(np.float32)
    check_lowering(lambda a: tf.ensure_shape(a, (2, None)) * 2.0, x)
    gd = tf.compat.v1.GraphDef()  # TF's shape inference stops this graph being built: a hand-written node
    node = gd.node.add(name="check", op="EnsureShape", input=["a"])
    node.attr["T"].type = tf.float32.as_datatype_enum
    node.attr["shape"].shape.CopyFrom(tf.TensorShape([None, 4]).as_proto())
    with pytest.raises(LoweringError, match=r"'check'.*\[2, 3\] is not compatible with expected shape \[\?,4\]"):
        lower_graph(gd, [InputSpec("a:0", tf.float32.as_datatype_enum, (2, 3))], ["check:0"])
