"""Shape ops lowered to HLO and evaluated against TF eager: Reshape, Transpose, ExpandDims, Squeeze,
BroadcastTo, Tile, Fill, Range, Shape/ShapeN/Size/Rank; constant folding of shape arithmetic through
them, and the error for a shape input that is not a compile-time constant."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering import LoweringError, can_lower
from tests.lowering_harness import check_lowering, lower_fn
from tests.shape_inputs import ALL_DTYPES, dtype_id, sample

R = tf.raw_ops

# op -> (fn, input dims): swept over every dtype.
SWEEP = {
    "Reshape": (lambda t: tf.reshape(t, [-1, 4]), (3, 4, 2)),
    "Transpose": (lambda t: tf.transpose(t, [2, 0, 1]), (3, 4, 2)),
    "ExpandDims": (lambda t: tf.expand_dims(t, -2), (3, 4)),
    "Squeeze": (lambda t: tf.squeeze(t), (3, 1, 2, 1)),
    "BroadcastTo": (lambda t: tf.broadcast_to(t, [2, 3, 4]), (3, 1)),
    "Tile": (lambda t: tf.tile(t, [2, 1, 3]), (2, 3, 1)),
    "Fill": (lambda t: tf.fill([2, 3], t), ()),
    "ShapeSizeRank": (lambda t: (tf.shape(t), tf.size(t), tf.rank(t), tf.shape(t, out_type=tf.int64),
                                 tf.size(t, out_type=tf.int64), *tf.shape_n([t, t[0]])), (3, 0, 2)),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", SWEEP)
def test_shape_op_dtypes(op: str, dtype) -> None:
    fn, dims = SWEEP[op]
    check_lowering(fn, sample(dtype, dims, seed=len(op)))


# (id, fn, input dims) over edge shapes: rank 0, size-0 dims, -1 inference.
SHAPE_CASES = [
    ("reshape-scalar-to-1", lambda t: tf.reshape(t, [1, 1]), ()),
    ("reshape-1-to-scalar", lambda t: tf.reshape(t, []), (1, 1)),
    ("reshape-empty-infer-after-zero", lambda t: tf.reshape(t, [-1, 0]), (0, 3)),
    ("reshape-empty-zero-then-infer", lambda t: tf.reshape(t, [0, -1]), (0, 3)),
    ("reshape-empty-infer", lambda t: tf.reshape(t, [3, -1]), (2, 0, 3)),
    ("reshape-int64-shape", lambda t: tf.reshape(t, tf.constant([2, -1, 2], tf.int64)), (6, 2)),
    ("transpose-scalar", lambda t: tf.transpose(t, []), ()),
    ("transpose-empty", lambda t: tf.transpose(t, [1, 2, 0]), (0, 2, 3)),
    ("transpose-identity", lambda t: tf.transpose(t, [0, 1]), (2, 3)),
    ("transpose-default-reverses", lambda t: tf.transpose(t), (2, 3, 4)),
    ("expand-scalar", lambda t: tf.expand_dims(t, 0), ()),
    ("expand-scalar-neg", lambda t: tf.expand_dims(t, -1), ()),
    ("expand-end", lambda t: tf.expand_dims(t, 2), (0, 3)),
    ("expand-int64-dim", lambda t: tf.expand_dims(t, tf.constant(-3, tf.int64)), (2, 3)),
    ("squeeze-dims", lambda t: tf.squeeze(t, [1]), (3, 1, 2, 1)),
    ("squeeze-neg-dims", lambda t: tf.squeeze(t, [-1, 0]), (1, 2, 1)),
    ("squeeze-to-scalar", lambda t: tf.squeeze(t), (1, 1)),
    ("squeeze-nothing", lambda t: tf.squeeze(t), (2, 3)),
    ("squeeze-empty", lambda t: tf.squeeze(t), (0, 1, 3)),
    ("broadcast-scalar", lambda t: tf.broadcast_to(t, [2, 3]), ()),
    ("broadcast-empty", lambda t: tf.broadcast_to(t, [2, 0, 3]), (0, 1)),
    ("broadcast-same", lambda t: tf.broadcast_to(t, [2, 3]), (2, 3)),
    ("tile-zero", lambda t: tf.tile(t, [0, 2]), (2, 3)),
    ("tile-scalar", lambda t: tf.tile(t, tf.constant([], tf.int32)), ()),
    ("tile-ones", lambda t: tf.tile(t, [1, 1]), (2, 3)),
    ("tile-int64", lambda t: tf.tile(t, tf.constant([3, 2], tf.int64)), (1, 2)),
    ("fill-empty", lambda t: tf.fill([0, 3], t), ()),
    ("fill-scalar", lambda t: tf.fill([], t), ()),
    ("fill-int64-dims", lambda t: tf.fill(tf.constant([2, 2], tf.int64), t), ()),
    ("shape-scalar", lambda t: (tf.shape(t), tf.size(t), tf.rank(t)), ()),
]


@pytest.mark.parametrize("fn,dims", [c[1:] for c in SHAPE_CASES], ids=[c[0] for c in SHAPE_CASES])
def test_shape_op_edge_shapes(fn, dims) -> None:
    check_lowering(fn, sample(np.float32, dims, seed=3))


RANGES = [
    ("int32", tf.int32, 0, 10, 3),
    ("int32-neg", tf.int32, 5, -3, -3),
    ("int32-empty", tf.int32, 4, 4, 1),
    ("int64", tf.int64, -7, 20, 4),
    ("float32", tf.float32, 0.1, 1.0, 0.3),
    ("float32-accumulates", tf.float32, 0.0, 10.0, 0.1),
    ("float32-neg", tf.float32, 1.5, -2.0, -0.25),
    ("float64", tf.float64, -1.0, 2.0, 0.2),
    ("bfloat16", tf.bfloat16, 0.0, 4.0, 0.5),
    ("bfloat16-long", tf.bfloat16, 1.0, 3000.0, 7.3),
    ("float32-long", tf.float32, -3.3, 77.7, 0.37),
]


@pytest.mark.parametrize("dtype,start,limit,delta", [r[1:] for r in RANGES], ids=[r[0] for r in RANGES])
def test_range_is_bit_exact(dtype, start, limit, delta) -> None:
    """TF computes ``start + T(i) * delta`` in the element type; the folded constant matches it exactly."""
    def fn(t):
        out = R.Range(start=tf.constant(start, dtype), limit=tf.constant(limit, dtype),
                      delta=tf.constant(delta, dtype))
        return out, t
    zero = np.float32(0)
    (got, _), (want, _) = hlo.evaluate(lower_fn(fn, zero), zero), fn(tf.constant(zero))
    assert got.dtype == want.numpy().dtype
    np.testing.assert_array_equal(got, want.numpy())


# --- compile-time constants ---------------------------------------------------------------------------

FOLDING = [
    ("stack-shape", lambda x, y: tf.reshape(x, tf.stack([tf.shape(x)[0], -1]))),
    ("shape-times-two", lambda x, y: tf.reshape(x, tf.shape(y) * 2)),
    ("concat-shapes", lambda x, y: tf.broadcast_to(y, tf.concat([tf.shape(x)[:1], tf.shape(y)], 0))),
    ("zeros-like-shape", lambda x, y: tf.zeros(tf.reverse(tf.shape(x), [0])) + tf.transpose(x)),
    ("range-of-size", lambda x, y: tf.range(tf.size(y)) * tf.rank(x)),
    ("shape-slice-fill", lambda x, y: tf.fill(tf.shape(x)[1:], y[0, 0])),
]


@pytest.mark.parametrize("fn", [f[1] for f in FOLDING], ids=[f[0] for f in FOLDING])
def test_shape_inputs_fold_to_constants(fn) -> None:
    x, y = sample(np.float32, (4, 6), seed=1), sample(np.float32, (2, 3), seed=2)
    check_lowering(fn, x, y)


def test_non_constant_shape_input_names_node_and_input() -> None:
    x, y = sample(np.float32, (4, 6), seed=1), np.array([6, 4], np.float32)
    with pytest.raises(LoweringError) as info:
        lower_fn(lambda a, b: tf.reshape(a, tf.cast(b, tf.int32)), x, y)
    err = info.value
    assert err.op_type == "Reshape"
    assert "input 1" in str(err) and "compile-time constant" in str(err)
    assert "Cast" in str(err) and err.source is not None and err.source[0] == __file__


def test_can_lower_checks_trailing_const_input() -> None:
    """ConcatV2 declares its last input (the axis) constant with a negative index."""
    gd = tf.function(lambda a, b: tf.concat([a, b], 0)).get_concrete_function(
        tf.TensorSpec([2], tf.float32), tf.TensorSpec([2], tf.float32)).graph.as_graph_def()
    node = next(n for n in gd.node if n.op == "ConcatV2")
    node.input.append("^a")  # control inputs do not count as data inputs
    assert can_lower(node, is_constant=lambda i: i == 2)
    verdict = can_lower(node, is_constant=lambda i: i != 2)
    assert not verdict and "input 2 of ConcatV2" in verdict.reason


def lower_with_dims(fn, traced: list, dims: tuple[int, ...]):
    """Trace ``fn`` with partly unknown dims (so TF's shape inference cannot reject the graph), then
    lower it for the static ``dims``."""
    from hlo.lowering import InputSpec, lower_graph

    cf = tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec(traced, tf.float32))
    (inp,) = cf.graph.inputs
    return lower_graph(cf.graph.as_graph_def(), [InputSpec(inp.name, 1, dims)], [t.name for t in cf.graph.outputs])


ERRORS = [
    ("squeeze-not-one", lambda t: tf.squeeze(t, [0]), [None, 3], (2, 3), "cannot squeeze dim"),
    ("reshape-not-multiple", lambda t: tf.reshape(t, [4, -1]), [None, 3], (2, 3), "not a multiple of 4"),
    ("reshape-count", lambda t: tf.reshape(t, [3, 2]), [None, 2], (2, 2), "requested shape"),
    ("broadcast-incompatible", lambda t: tf.broadcast_to(t, [2, 3]), [None, 3], (4, 3), "incompatible"),
    ("expand-dims-range", lambda t: tf.expand_dims(t, -5), None, (2, 3), "out of range"),
    ("split-uneven", lambda t: tf.split(t, 2, axis=0), [None, 3], (3, 3), "evenly divide"),
    ("splitv-sum", lambda t: tf.split(t, [1, 1], axis=0), [None, 3], (3, 3), "must sum"),
    ("slice-oob", lambda t: tf.slice(t, [1, 0], [2, 3]), [None, 3], (2, 3), "expected size"),
    ("mirror-too-wide", lambda t: tf.pad(t, [[2, 0], [0, 0]], mode="REFLECT"), [None, 3], (2, 3),
     "less than the dimension size"),
    ("concat-mismatch", lambda t: tf.concat([t, tf.zeros([2, 3])], 1), [None, 3], (3, 3), "must match"),
    ("strided-shrink-oob", lambda t: t[5], [None, 3], (2, 3), "out of bounds"),
    ("cumsum-scalar", lambda t: tf.cumsum(t, 0), None, (), "scan axis"),
    ("topk-too-few", lambda t: tf.math.top_k(t, 4).values, [2, None], (2, 3), "at least 4 columns"),
]


@pytest.mark.parametrize("fn,traced,dims,match", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_graphs_fail_at_compile_time_with_tf_reason(fn, traced, dims, match) -> None:
    with pytest.raises(LoweringError, match=match):
        lower_with_dims(fn, traced, dims)
