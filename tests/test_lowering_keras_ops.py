"""The ops Keras layers emit that issue 18 adds, against TF eager through the HLO evaluator:
SpaceToBatchND/BatchToSpaceND (dilated convolutions), InvertPermutation/BroadcastArgs/ConcatOffset
(shape arithmetic of gradients), Bucketize and the bincounts. Integer results are compared exactly,
float32 ones with the harness's tolerances (rtol 2e-5, atol 1e-6); errors by type and message."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from hlo.lowering import LoweringError
from tests.lowering_harness import check_lowering, lower_fn

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("shape,block,pads", [
    ((2, 5, 4, 3), [2, 2], [[1, 0], [0, 2]]),
    ((1, 6, 2), [3], [[0, 0]]),
    ((3, 4, 6, 2, 2), [2, 3], [[0, 2], [3, 0]]),
])
def test_space_to_batch_and_back(shape, block, pads) -> None:
    x = RNG.normal(size=shape).astype(np.float32)
    check_lowering(lambda a: tf.space_to_batch_nd(a, block, pads), x)
    y = tf.space_to_batch_nd(x, block, pads).numpy()
    check_lowering(lambda a: tf.batch_to_space(a, block, pads), y)
    check_lowering(lambda a: tf.compat.v1.space_to_batch_nd(a, block, pads), x.astype(np.int32))


def test_space_to_batch_4d_forms_and_dilated_conv_gradient() -> None:
    x = RNG.normal(size=(1, 4, 4, 2)).astype(np.float32)
    check_lowering(lambda a: tf.raw_ops.SpaceToBatch(input=a, paddings=[[0, 2], [2, 0]], block_size=2), x)
    y = tf.raw_ops.SpaceToBatch(input=x, paddings=[[0, 2], [2, 0]], block_size=2).numpy()
    check_lowering(lambda a: tf.raw_ops.BatchToSpace(input=a, crops=[[0, 2], [2, 0]], block_size=2), y)
    w = RNG.normal(size=(3, 3, 2, 2)).astype(np.float32)

    def grads(a, k):
        with tf.GradientTape() as tape:
            tape.watch([a, k])
            out = tf.nn.conv2d(a, k, strides=1, padding="SAME", dilations=2)
            loss = tf.reduce_sum(out * out)
        return tape.gradient(loss, [a, k])
    x = RNG.normal(size=(2, 7, 7, 2)).astype(np.float32)
    check_lowering(grads, x, w, rtol=1e-4, atol=1e-4)


def test_space_to_batch_errors_name_the_node() -> None:
    x = np.zeros((1, 4, 4, 1), np.float32)
    with pytest.raises(LoweringError, match=r"SpaceToBatchND.*input 1 .* must be a compile-time constant"):
        lower_fn(lambda a, b: tf.space_to_batch_nd(a, b, [[0, 0], [0, 0]]), x, np.array([2, 2], np.int32))


def test_shape_arithmetic_of_gradients() -> None:
    perm = np.array([2, 0, 3, 1], np.int32)
    check_lowering(lambda p: tf.math.invert_permutation(p), perm)
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    check_lowering(lambda a: tf.transpose(a, tf.math.invert_permutation(tf.constant([2, 0, 3, 1]))), x)
    check_lowering(lambda a: tf.broadcast_to(a[:, :1], tf.raw_ops.BroadcastArgs(
        s0=tf.shape(a[:, :1]), s1=tf.constant([4, 1, 3, 1, 1]))), x)
    y = RNG.normal(size=(2, 2, 4, 5)).astype(np.float32)
    check_lowering(lambda a, b: tf.raw_ops.ConcatOffset(concat_dim=1, shape=[tf.shape(a), tf.shape(b), tf.shape(a)]),
                   x, y)

    def concat_grad(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            loss = tf.reduce_sum(tf.concat([a, b, a], axis=1) ** 2)
        return tape.gradient(loss, [a, b])
    check_lowering(concat_grad, x, y)
    with pytest.raises(LoweringError, match=r"InvertPermutation.*1 is duplicated in the input"):
        lower_fn(lambda a: tf.transpose(a, tf.math.invert_permutation(tf.constant([1, 1, 0, 2]))), x)


def test_bucketize_bit_exact() -> None:
    x = np.array([[-3.0, -0.5, 0.0, 0.25], [0.5, 7.0, np.nan, -np.inf]], np.float32)
    bounds = [-0.5, 0.0, 0.5, 1.0]
    check_lowering(lambda a: tf.raw_ops.Bucketize(input=a, boundaries=bounds), x)
    check_lowering(lambda a: tf.raw_ops.Bucketize(input=a, boundaries=bounds), x.astype(np.float64))
    check_lowering(lambda a: tf.raw_ops.Bucketize(input=a, boundaries=[-1.0, 2.0, 2.5]),
                   RNG.integers(-3, 4, (3, 5)).astype(np.int64))
    check_lowering(lambda a: tf.raw_ops.Bucketize(input=a, boundaries=[]), x)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("binary", [False, True])
def test_dense_bincount(weighted: bool, binary: bool) -> None:
    values = np.array([[0, 3, 3, 5, 9], [1, 1, 1, 0, 2]], np.int32)  # 9 >= size: dropped, as in TF
    weights = RNG.normal(size=values.shape).astype(np.float32) if weighted else np.zeros((0,), np.float32)

    def count(v, w):
        return (tf.raw_ops.DenseBincount(input=v, size=6, weights=w, binary_output=binary),
                tf.raw_ops.DenseBincount(input=v[0], size=7, weights=w[0] if weighted else w, binary_output=binary))
    check_lowering(count, values, weights)
    check_lowering(lambda v: tf.raw_ops.DenseBincount(input=v, size=4, weights=tf.zeros((0,), tf.int64),
                                                     binary_output=binary), values.astype(np.int64))


def test_bincount_v1() -> None:
    values = np.array([0, 3, 3, 5, 1, 1, 8], np.int32)
    weights = RNG.normal(size=values.shape).astype(np.float32)
    check_lowering(lambda v, w: tf.raw_ops.Bincount(arr=v, size=6, weights=w), values, weights)
    check_lowering(lambda v: tf.raw_ops.Bincount(arr=v, size=6, weights=tf.zeros((0,), tf.int32)), values)


_RESIZE_FLAGS = [(False, False), (True, False), (False, True)]  # (align_corners, half_pixel_centers)


@pytest.mark.parametrize("flags", _RESIZE_FLAGS)
@pytest.mark.parametrize("size", [(7, 5), (2, 3), (1, 1), (4, 6)])
def test_resize_bilinear_and_nearest(flags, size) -> None:
    """Forward: float32 within 1 ulp-ish of TF (same operation order); nearest is a gather: exact."""
    align, half = flags
    x = RNG.normal(size=(2, 4, 6, 3)).astype(np.float32)
    check_lowering(lambda a: tf.raw_ops.ResizeBilinear(images=a, size=size, align_corners=align,
                                                       half_pixel_centers=half), x, rtol=1e-6, atol=1e-6)
    check_lowering(lambda a: tf.raw_ops.ResizeNearestNeighbor(images=a, size=size, align_corners=align,
                                                              half_pixel_centers=half), x)
    ints = RNG.integers(-50, 50, (1, 4, 6, 2)).astype(np.int32)
    check_lowering(lambda a: tf.raw_ops.ResizeBilinear(images=a, size=size, align_corners=align,
                                                       half_pixel_centers=half), ints, rtol=1e-6, atol=1e-5)
    check_lowering(lambda a: tf.raw_ops.ResizeNearestNeighbor(images=a, size=size, align_corners=align,
                                                              half_pixel_centers=half), ints)


@pytest.mark.parametrize("flags", _RESIZE_FLAGS)
@pytest.mark.parametrize("size", [(7, 5), (2, 3), (8, 12)])
def test_resize_gradients(flags, size) -> None:
    align, half = flags
    x = RNG.normal(size=(2, 4, 6, 3)).astype(np.float32)
    g = RNG.normal(size=(2, *size, 3)).astype(np.float32)
    check_lowering(lambda d, a: tf.raw_ops.ResizeBilinearGrad(grads=d, original_image=a, align_corners=align,
                                                              half_pixel_centers=half), g, x, rtol=1e-5, atol=1e-5)
    check_lowering(lambda d: tf.raw_ops.ResizeNearestNeighborGrad(grads=d, size=(4, 6), align_corners=align,
                                                                  half_pixel_centers=half), g, rtol=1e-5, atol=1e-5)


def test_resize_errors_name_the_node() -> None:
    x = np.zeros((1, 4, 4, 1), np.float32)
    with pytest.raises(LoweringError, match=r"ResizeBilinear.*If half_pixel_centers is True, align_corners must "
                                            r"be False"):
        lower_fn(lambda a: tf.raw_ops.ResizeBilinear(images=a, size=(2, 2), align_corners=True,
                                                     half_pixel_centers=True), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rgb_hsv_round_trip(dtype) -> None:
    """Within 2 ulp-ish of TF (same formulas and order; the C compiler may contract to FMAs)."""
    x = RNG.uniform(0, 1, size=(2, 3, 4, 3)).astype(dtype)
    x[0, 0, 0] = [0.5, 0.5, 0.5]  # grey: range 0
    x[0, 0, 1] = [0.0, 0.0, 0.0]  # black: V 0
    x[0, 0, 2] = [0.2, 0.9, 0.9]  # a tie for the maximum
    check_lowering(lambda a: tf.image.rgb_to_hsv(a), x, rtol=1e-6, atol=1e-6)
    check_lowering(lambda a: tf.image.hsv_to_rgb(a), x, rtol=1e-6, atol=1e-6)
    with pytest.raises(LoweringError, match=r"RGBToHSV.*RGBToHSV does not support dtype (half|float16)"):
        lower_fn(lambda a: tf.raw_ops.RGBToHSV(images=a), np.zeros((2, 3), np.float16))


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_unsorted_segment_ops(op: str) -> None:
    """Sums in index order like TF's loop; max/min/prod exact; empty segments get TF's identities."""
    fn = getattr(tf.math, f"unsorted_segment_{op}")
    data = RNG.normal(size=(6, 2, 3)).astype(np.float32)
    ids = np.array([3, 0, 3, -1, 1, 3], np.int32)  # segment 2 and 4 empty, -1 dropped
    check_lowering(lambda d, i: fn(d, i, 5), data, ids)
    ids2 = np.array([[0, 2], [2, 2], [1, 0], [0, 0], [2, 1], [1, 1]], np.int64)
    check_lowering(lambda d, i: fn(d, i, 4), data, ids2)
    check_lowering(lambda d, i: fn(d, i, 3), RNG.integers(-9, 9, (6, 4)).astype(np.int32), ids % 3)

    def gather_grad(p, i):
        with tf.GradientTape() as tape:
            tape.watch(p)
            loss = tf.reduce_sum(tf.gather(p, i) ** 2)
        return tf.convert_to_tensor(tape.gradient(loss, p))  # IndexedSlices made dense: UnsortedSegmentSum
    check_lowering(gather_grad, data, np.array([1, 0, 1, 4], np.int32))


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@pytest.mark.parametrize("ksize,strides", [(2, 2), (3, 2), (2, 1)])
def test_max_pool_3d_grad_gives_ties_the_gradient_as_tf(padding, ksize, strides) -> None:
    x = RNG.normal(size=(2, 5, 4, 6, 3)).astype(np.float32)
    x[0, :2, :2, :2, 0] = 1.5  # a window of ties: TF gives each the whole gradient
    x[1, 1, 1, 1:3, 1] = x[1, 1, 1, 1, 1] + 5e-6  # within TF's 1e-5 tie distance

    def grad(a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            y = tf.nn.max_pool3d(a, ksize, strides, padding)
            loss = tf.reduce_sum(y * tf.reshape(tf.range(tf.size(y), dtype=tf.float32) / 10.0, tf.shape(y)))
        return tape.gradient(loss, a)
    check_lowering(grad, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ndtri_and_f64_erfinv(dtype) -> None:
    """TF's Eigen/Cephes formulas: float64 within 1e-12 relative, float32 within 2e-6 (the tails)."""
    p = np.concatenate([RNG.uniform(0, 1, 40), [0.0, 1.0, 1e-20, 1e-300 if dtype == np.float64 else 1e-30,
                                                 np.exp(-2.0), 1 - np.exp(-2.0), 0.5, 1 - 1e-9, -0.1, 1.5]])
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == np.float64 else dict(rtol=2e-6, atol=2e-6)
    check_lowering(tf.math.ndtri, p.astype(dtype), **tol)
    if dtype == np.float64:
        check_lowering(tf.math.erfinv, (2 * p - 1).astype(dtype), **tol)


def test_roll_space_to_depth_and_back() -> None:
    x = RNG.normal(size=(2, 4, 6, 3)).astype(np.float32)
    check_lowering(lambda a: tf.roll(a, shift=[1, -2, 7], axis=[1, 2, 1]), x)
    check_lowering(lambda a: tf.roll(a, shift=3, axis=-1), x.astype(np.int32))
    check_lowering(lambda a: tf.nn.space_to_depth(a, 2), x)
    y = RNG.normal(size=(2, 3, 2, 8)).astype(np.float32)
    check_lowering(lambda a: tf.nn.depth_to_space(a, 2), y)
    with pytest.raises(LoweringError, match=r"SpaceToDepth.*data_format NCHW is not supported"):
        lower_fn(lambda a: tf.raw_ops.SpaceToDepth(input=a, block_size=2, data_format="NCHW"), np.zeros((1, 3, 4, 6), np.float32))


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_pad_gradient(mode: str) -> None:
    x = RNG.normal(size=(2, 5, 4)).astype(np.float32)
    pads = [[0, 1], [2, 3], [1, 0]] if mode == "REFLECT" else [[1, 2], [4, 5], [0, 3]]

    def grad(a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            y = tf.pad(a, pads, mode=mode)
            loss = tf.reduce_sum(y * tf.reshape(tf.range(tf.size(y), dtype=tf.float32), tf.shape(y)))
        return tape.gradient(loss, a)
    check_lowering(grad, x)


def test_in_top_k_bit_exact() -> None:
    p = RNG.normal(size=(6, 5)).astype(np.float32)
    p[1, 3] = p[1, 0]  # a tie with the target counts for it
    p[2, 4] = np.nan  # a NaN anywhere in the row: false
    p[3, 1] = np.inf  # the target's prediction is inf: false
    targets = np.array([0, 0, 1, 1, 4, 2], np.int32)
    for k in (1, 2, 5):
        check_lowering(lambda a, t: tf.math.in_top_k(t, a, k), p, targets)
    check_lowering(lambda a, t, k: tf.raw_ops.InTopKV2(predictions=a, targets=t, k=k), p, targets.astype(np.int64),
                   np.int64(3))


@pytest.mark.parametrize("k", [0, 1, -2, 3])
def test_matrix_diagonals_exact(k: int) -> None:
    x = RNG.normal(size=(2, 4, 5)).astype(np.float32)
    check_lowering(lambda a: tf.linalg.diag_part(a, k=k, padding_value=7.0), x)
    d = tf.linalg.diag_part(x, k=k).numpy()
    check_lowering(lambda a: tf.linalg.diag(a, k=k, padding_value=-1.0), d)
    check_lowering(lambda a: tf.linalg.diag(a, k=k, num_rows=4, num_cols=5), d)
    check_lowering(lambda a: tf.raw_ops.MatrixDiagPart(input=a), x.astype(np.int32))
    check_lowering(lambda a: tf.raw_ops.MatrixDiag(diagonal=a), d.astype(np.int64))
    with pytest.raises(LoweringError, match=r"MatrixDiagPartV3.*only a single diagonal is supported"):
        lower_fn(lambda a: tf.linalg.diag_part(a, k=(0, 1)), x)


def test_searchsorted_linspace_cross() -> None:
    s = np.sort(RNG.integers(-5, 5, (3, 7)), axis=1).astype(np.float32)
    v = RNG.integers(-6, 6, (3, 4)).astype(np.float32)
    for side in ("left", "right"):
        check_lowering(lambda a, b: tf.searchsorted(a, b, side=side), s, v)
        check_lowering(lambda a, b: tf.searchsorted(a, b, side=side, out_type=tf.int64), s.astype(np.int32),
                       v.astype(np.int32))
    check_lowering(lambda: (tf.linspace(-1.5, 2.0, 7), tf.linspace(tf.constant(0.0, tf.float64), 1.0, 1)))
    # tf.linspace is composed in Python; the LinSpace op itself (num > 1, both float types):
    check_lowering(lambda: (tf.raw_ops.LinSpace(start=-1.5, stop=2.0, num=7),
                            tf.raw_ops.LinSpace(start=tf.constant(0.1, tf.float64), stop=tf.constant(1.0, tf.float64),
                                                num=5),
                            tf.raw_ops.LinSpace(start=3.0, stop=4.0, num=1)))
    a, b = RNG.normal(size=(2, 4, 3)).astype(np.float32), RNG.normal(size=(2, 4, 3)).astype(np.float32)
    check_lowering(tf.linalg.cross, a, b)


def test_add_n_of_complex_gradients() -> None:
    """AddN sums complex64 gradients (Keras MelSpectrogram's backward pass through its RFFT)."""
    a = (RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))).astype(np.complex64)
    b = (RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))).astype(np.complex64)
    check_lowering(lambda x, y: tf.math.add_n([x, y, x]), a, b)
