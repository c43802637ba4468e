"""Dense math and softmax lowerings against TF eager: MatMul and BatchMatMul V1/V2/V3 (transposes,
adjoints, broadcast batch dims, size-0 dims) and Softmax, LogSoftmax and the two softmax cross-entropy
losses (any rank, broadcast labels, non-finite logits, out-of-range sparse labels)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.dtypes import PrimitiveType as P
from hlo.lowering import LoweringError, UnsupportedOpError
from hlo.lowering.registry import rule_for
from tests.lowering_harness import check_lowering, lower_fn

R = tf.raw_ops
BF16 = P.BF16.numpy
FLOATS = (np.float32, np.float64, np.float16, BF16)
INTS = (np.int32, np.int64, np.int8, np.int16, np.uint8)


def dtypes_of(op: str) -> list:
    return [t for t in FLOATS + INTS if P.from_numpy(np.dtype(t)) in rule_for(op).dtypes]


def ids(v):
    return v if isinstance(v, str) else np.dtype(v).name


def data(dtype, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        low = 0 if np.dtype(dtype).kind == "u" else -4
        return rng.integers(low, 5, shape).astype(dtype)
    return rng.uniform(-2.0, 2.0, shape).astype(dtype)


# --- MatMul ----------------------------------------------------------------------------------------

# (a dims, b dims, transpose_a, transpose_b)
MATMUL_CASES = [
    ((3, 4), (4, 5), False, False),
    ((4, 3), (4, 5), True, False),
    ((3, 4), (5, 4), False, True),
    ((4, 3), (5, 4), True, True),
    ((0, 3), (3, 2), False, False),
    ((3, 0), (0, 2), False, False),
    ((1, 1), (1, 7), False, False),
]


@pytest.mark.parametrize("dtype", dtypes_of("MatMul"), ids=ids)
def test_matmul(dtype) -> None:
    args = [data(dtype, dims, seed=i) for i, (a, b, _, _) in enumerate(MATMUL_CASES) for dims in (a, b)]

    def fn(*ts):
        return tuple(tf.matmul(ts[2 * i], ts[2 * i + 1], transpose_a=ta, transpose_b=tb)
                     for i, (_, _, ta, tb) in enumerate(MATMUL_CASES))
    check_lowering(fn, *args)


def test_int32_matmul_wraps_like_tf() -> None:
    check_lowering(lambda a, b: tf.matmul(a, b), np.full((2, 2), 2**30, np.int32), np.ones((2, 2), np.int32))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_matmul_nan_and_inf() -> None:
    a = np.array([[np.nan, 1.0], [np.inf, 0.0], [1.0, 2.0]], np.float32)
    b = np.array([[1.0, -np.inf], [2.0, 3.0]], np.float32)
    check_lowering(lambda x, y: tf.matmul(x, y), a, b)


def test_matmul_dtypes_are_tf_cpu_kernels() -> None:
    assert dtypes_of("MatMul") == [np.float32, np.float64, np.float16, BF16, np.int32, np.int64]
    x = np.zeros((2, 2), np.uint8)  # in the op's type list, but TF has no CPU kernel for it
    with pytest.raises(UnsupportedOpError, match="does not support dtype uint8"):
        lower_fn(lambda a, b: R.BatchMatMulV2(x=a, y=b), x, x)


# --- BatchMatMul ---------------------------------------------------------------------------------

# (x dims, y dims) without adjoints: broadcasting of batch dims, missing batch dims, size 0.
BATCH_CASES = [
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((3, 4), (2, 4, 5)),
    ((2, 3, 3, 4), (4, 5)),
    ((1, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (1, 1, 4, 5)),
    ((0, 3, 4), (4, 5)),
    ((2, 3, 0), (2, 0, 5)),
]


def _batch_fn(op: str, cases, **attrs):
    f = getattr(R, op)
    return lambda *ts: tuple(f(x=ts[2 * i], y=ts[2 * i + 1], **attrs) for i in range(len(cases)))


def _batch_args(dtype, cases):
    return [data(dtype, dims, seed=i) for i, case in enumerate(cases) for dims in case]


@pytest.mark.parametrize("dtype", dtypes_of("BatchMatMulV2"), ids=ids)
def test_batch_matmul_v2(dtype) -> None:
    check_lowering(_batch_fn("BatchMatMulV2", BATCH_CASES), *_batch_args(dtype, BATCH_CASES))


@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("adj_y", [False, True])
def test_batch_matmul_adjoints(adj_x, adj_y) -> None:
    def adjust(dims, adj):
        return dims[:-2] + dims[-2:][::-1] if adj else dims
    cases = [(adjust(x, adj_x), adjust(y, adj_y)) for x, y in BATCH_CASES]
    check_lowering(_batch_fn("BatchMatMulV2", cases, adj_x=adj_x, adj_y=adj_y), *_batch_args(np.float32, cases))


@pytest.mark.parametrize("dtype", dtypes_of("BatchMatMul"), ids=ids)
def test_batch_matmul_v1(dtype) -> None:
    cases = [((2, 3, 4), (2, 4, 5)), ((3, 4), (4, 2)), ((2, 1, 2, 3), (2, 1, 3, 2))]
    check_lowering(_batch_fn("BatchMatMul", cases, adj_y=True), *_batch_args(dtype, [(x, y[:-2] + y[-2:][::-1])
                                                                                  for x, y in cases]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16, np.int32, np.int64, np.int16], ids=ids)
def test_batch_matmul_v3_same_types(dtype) -> None:
    tout = tf.as_dtype(dtype)
    check_lowering(_batch_fn("BatchMatMulV3", BATCH_CASES, Tout=tout), *_batch_args(dtype, BATCH_CASES))


@pytest.mark.parametrize("ta,tb", [(np.int8, np.int8), (np.int8, np.uint8), (np.uint8, np.uint8),
                                   (np.uint8, np.int8)], ids=ids)
def test_batch_matmul_v3_int8_to_int32(ta, tb) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0 if ta == np.uint8 else -128, 128, (2, 3, 16)).astype(ta)
    y = rng.integers(0 if tb == np.uint8 else -128, 128, (16, 4)).astype(tb)
    check_lowering(lambda a, b: R.BatchMatMulV3(x=a, y=b, Tout=tf.int32, adj_x=False), x, y)


def test_batch_matmul_v1_does_not_broadcast() -> None:
    gd_fn = tf.function(lambda a, b: R.BatchMatMul(x=a, y=b)).get_concrete_function(
        tf.TensorSpec([2, 3, 4], tf.float32), tf.TensorSpec([2, 4, 5], tf.float32))
    from hlo.lowering import InputSpec, lower_graph
    ins = [InputSpec(t.name, 1, d) for t, d in zip(gd_fn.graph.inputs, [(2, 3, 4), (1, 4, 5)])]
    with pytest.raises(LoweringError, match="does not broadcast"):
        lower_graph(gd_fn.graph.as_graph_def(), ins, [gd_fn.graph.outputs[0].name])


def test_dense_on_sequence_needs_no_broadcast_of_the_weights() -> None:
    module = check_lowering(lambda a, b: tf.matmul(a, b), data(np.float32, (2, 3, 4)), data(np.float32, (4, 5)))
    assert not any(i.opcode is hlo.Opcode.BROADCAST for _, i in module.instructions())


# --- Softmax / LogSoftmax ------------------------------------------------------------------------

SOFTMAX_SHAPES = [(5,), (3, 4), (2, 3, 4), (1, 1), (0, 4), (3, 0)]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_softmax(op, dtype) -> None:
    f = getattr(R, op)
    args = [(data(dtype, s, seed=i) * 10).astype(dtype) for i, s in enumerate(SOFTMAX_SHAPES)]
    check_lowering(lambda *ts: tuple(f(logits=t) for t in ts), *args)


def test_softmax_is_stable_for_large_logits() -> None:
    x = np.array([[1000.0, 999.0, -1000.0], [-1e30, -1e30, -1e30]], np.float32)
    check_lowering(lambda t: (tf.nn.softmax(t), tf.nn.log_softmax(t)), x)


NONFINITE_ROWS = [[np.inf, 1.0, 2.0], [np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [-np.inf, -np.inf, -np.inf],
                  [np.inf, np.inf, 1.0], [-np.inf, 1.0, 2.0]]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_softmax_non_finite_rows() -> None:
    """Rows with NaN or +inf are all NaN, as in TF's Eigen kernel (the f64 kernel here; TF's f32/f16
    Softmax goes through oneDNN, whose answers on such rows depend on where the NaN sits)."""
    x = np.array(NONFINITE_ROWS, np.float64)
    check_lowering(lambda t: (tf.nn.softmax(t), tf.nn.log_softmax(t)), x)
    module = lower_fn(lambda t: tf.nn.softmax(t), x.astype(np.float32))
    (got,) = hlo.evaluate(module, x.astype(np.float32))
    assert np.isnan(got[:5]).all() and np.allclose(got[5], [0.0, 0.26894143, 0.73105857])


def test_softmax_of_a_scalar_is_rejected() -> None:
    gd_fn = tf.function(lambda a: R.Softmax(logits=a)).get_concrete_function(tf.TensorSpec([2], tf.float32))
    gd = gd_fn.graph.as_graph_def()
    from hlo.lowering import InputSpec, lower_graph
    with pytest.raises(LoweringError, match="rank at least 1"):
        lower_graph(gd, [InputSpec(gd_fn.graph.inputs[0].name, 1, ())], [gd_fn.graph.outputs[0].name])


# --- cross-entropy losses ------------------------------------------------------------------------

def labels_like(dtype, shape, seed: int = 1) -> np.ndarray:
    p = np.random.default_rng(seed).uniform(0.0, 1.0, shape)
    return (p / np.maximum(p.sum(axis=-1, keepdims=True), 1e-9)).astype(dtype)


# (features dims, labels dims)
XENT_CASES = [((4, 5), (4, 5)), ((4, 5), (1, 5)), ((1, 5), (3, 5)), ((0, 5), (0, 5)), ((3, 0), (3, 0))]


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_softmax_cross_entropy(dtype) -> None:
    args = []
    for i, (f, lab) in enumerate(XENT_CASES):
        args += [(data(dtype, f, seed=i) * 4).astype(dtype), labels_like(dtype, lab, seed=i)]

    def fn(*ts):
        return tuple(R.SoftmaxCrossEntropyWithLogits(features=ts[2 * i], labels=ts[2 * i + 1])
                     for i in range(len(XENT_CASES)))
    check_lowering(fn, *args)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_non_finite(dtype) -> None:
    x = np.array(NONFINITE_ROWS, dtype)
    labels = np.array([[0.2, 0.3, 0.5]] * 5 + [[0.0, 0.5, 0.5]], dtype)
    check_lowering(lambda f, l: R.SoftmaxCrossEntropyWithLogits(features=f, labels=l), x, labels)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("label_type", [np.int32, np.int64], ids=ids)
def test_sparse_softmax_cross_entropy(dtype, label_type) -> None:
    rng = np.random.default_rng(0)
    f1, l1 = (data(dtype, (6, 5)) * 4).astype(dtype), rng.integers(0, 5, 6).astype(label_type)
    f2, l2 = data(dtype, (3, 1), seed=1), np.zeros(3, label_type)
    f3, l3 = data(dtype, (0, 4), seed=2), np.zeros(0, label_type)

    def fn(a, b, c, d, e, g):
        return tuple(R.SparseSoftmaxCrossEntropyWithLogits(features=f, labels=l) for f, l in ((a, b), (c, d), (e, g)))
    check_lowering(fn, f1, l1, f2, l2, f3, l3)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_sparse_softmax_cross_entropy_non_finite() -> None:
    x = np.array(NONFINITE_ROWS, np.float32)
    check_lowering(lambda f, l: R.SparseSoftmaxCrossEntropyWithLogits(features=f, labels=l), x,
                   np.array([1, 1, 0, 2, 2, 1], np.int32))


def test_sparse_labels_out_of_range_give_nan_rows() -> None:
    """TF CPU raises; a compiled kernel cannot, so those rows are NaN (TF GPU's and XLA's answer)."""
    x = data(np.float32, (4, 3))
    fn = lambda f, l: R.SparseSoftmaxCrossEntropyWithLogits(features=f, labels=l)  # noqa: E731
    module = lower_fn(fn, x, np.zeros(4, np.int64))
    labels = np.array([0, -1, 3, 2], np.int64)
    loss, backprop = hlo.evaluate(module, x, labels)
    want_loss, want_backprop = fn(x, np.array([0, 0, 0, 2], np.int64))
    assert np.isnan(loss[1:3]).all() and np.isnan(backprop[1:3]).all()
    np.testing.assert_allclose(loss[[0, 3]], np.asarray(want_loss)[[0, 3]], rtol=1e-6)
    np.testing.assert_allclose(backprop[[0, 3]], np.asarray(want_backprop)[[0, 3]], rtol=1e-6, atol=1e-7)


def test_constant_out_of_range_labels_are_rejected_with_tfs_message() -> None:
    with pytest.raises(LoweringError, match=r"label value of 5 which is outside the valid range of \[0, 5\)"):
        lower_fn(lambda f: R.SparseSoftmaxCrossEntropyWithLogits(features=f, labels=[0, 5]),
                 data(np.float32, (2, 5)))
