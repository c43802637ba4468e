"""Ops tf2xla lowers for CPU that Keras layers, ``tf.image``, ``tf.math`` and ``tf.linalg`` users hit:
tensor and matrix diagonals (Diag, DiagPart, MatrixSetDiag/V2/V3), Reverse (v1), ReverseSequence,
CumulativeLogsumexp, DataFormatVecPermute/DimMap, ConjugateTranspose, ExtractImagePatches, LRN and
LRNGrad, MaxPoolGradGrad, Cholesky, MatrixTriangularSolve, MatrixSolve, MatrixInverse. Each against TF
eager through the evaluator (data movement exact; float32 arithmetic at the harness's rtol 2e-5 unless
stated), then all of them in one function compiled for the CPU; errors with TF's message."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import hlo
import tfxla_plugin
from backends.cpu.codegen import generate
from backends.cpu.pipeline import prepare
from hlo.lowering.errors import LoweringError
from tests.lowering_harness import check_lowering, lower_fn

RNG = np.random.default_rng(11)


def _f32(*dims: int) -> np.ndarray:
    return RNG.normal(size=dims).astype(np.float32)


@pytest.mark.parametrize("dims", [(3,), (2, 3), (1, 2, 2), (0,)])
def test_diag_and_diag_part(dims) -> None:
    x = _f32(*dims)
    check_lowering(lambda a: tf.raw_ops.Diag(diagonal=a), x)
    check_lowering(lambda a: tf.raw_ops.DiagPart(input=tf.raw_ops.Diag(diagonal=a) * 2.0), x)
    check_lowering(lambda a: tf.raw_ops.Diag(diagonal=a), x.astype(np.int32))


@pytest.mark.parametrize("k", [0, 1, -2, 3])
def test_matrix_set_diag(k: int) -> None:
    x = _f32(2, 4, 5)
    length = min(4 + min(k, 0), 5 - max(k, 0))
    d = _f32(2, length)
    check_lowering(lambda a, b: tf.linalg.set_diag(a, b, k=k), x, d)
    if k == 0:
        check_lowering(lambda a, b: tf.raw_ops.MatrixSetDiag(input=a, diagonal=b), x.astype(np.int64),
                       d.astype(np.int64))


def test_reverse_v1_and_reverse_sequence() -> None:
    x = _f32(3, 4, 2)
    check_lowering(lambda a: tf.raw_ops.Reverse(tensor=a, dims=[True, False, True]), x)
    lengths = np.array([4, 0, 2], np.int64)
    check_lowering(lambda a, n: tf.reverse_sequence(a, n, seq_axis=1, batch_axis=0), x, lengths)
    check_lowering(lambda a, n: tf.reverse_sequence(a, n, seq_axis=0, batch_axis=2), x, np.array([3, 1], np.int32))
    check_lowering(lambda a, n: tf.reverse_sequence(a, n, seq_axis=2, batch_axis=1), x.astype(np.int32),
                   np.array([2, 1, 0, 2], np.int32))


def test_reverse_sequence_length_past_the_dim_known_at_compile_time() -> None:
    with pytest.raises(LoweringError, match=r"seq_lens\(b\) < 0 or seq_lens\(b\) > input.dims\(seq_dim\) for b = 1"):
        lower_fn(lambda a: tf.reverse_sequence(a, tf.constant([1, 5]), seq_axis=1, batch_axis=0), _f32(2, 4))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_logsumexp(exclusive: bool, reverse: bool) -> None:
    x = _f32(3, 5) * 10
    x[0, 1] = -np.inf
    x[1, :] = -np.inf
    fn = lambda a: tf.math.cumulative_logsumexp(a, axis=1, exclusive=exclusive, reverse=reverse)  # noqa: E731
    check_lowering(fn, x, rtol=1e-6, atol=1e-6)
    check_lowering(lambda a: tf.math.cumulative_logsumexp(a, axis=0), x.astype(np.float64))


def test_data_format_ops() -> None:
    perm = lambda src, dst: lambda a: tf.raw_ops.DataFormatVecPermute(x=a, src_format=src, dst_format=dst)  # noqa: E731
    check_lowering(perm("NHWC", "NCHW"), np.array([1, 2, 3, 4], np.int32))
    check_lowering(perm("NCHW", "NHWC"), np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.int64))
    check_lowering(perm("NHWC", "NWHC"), np.array([5, 6], np.int32))  # spatial dims only
    dim_map = lambda a: tf.raw_ops.DataFormatDimMap(x=a, src_format="NHWC", dst_format="NCHW")  # noqa: E731
    check_lowering(dim_map, np.array([[-4, -3, -2, -1], [0, 1, 2, 3]], np.int32))


def test_conjugate_transpose() -> None:
    z = (_f32(2, 3) + 1j * _f32(2, 3)).astype(np.complex64)
    check_lowering(lambda a: tf.raw_ops.ConjugateTranspose(x=a, perm=[1, 0]), z)
    check_lowering(lambda a: tf.raw_ops.ConjugateTranspose(x=a, perm=[1, 0]), z.real.copy())


@pytest.mark.parametrize("sizes,strides,rates,padding", [
    ([1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID"),
    ([1, 3, 2, 1], [1, 2, 3, 1], [1, 1, 1, 1], "SAME"),
    ([1, 2, 3, 1], [1, 1, 2, 1], [1, 2, 1, 1], "SAME"),
    ([1, 3, 3, 1], [1, 1, 1, 1], [1, 2, 2, 1], "VALID"),  # dilated: one window row
])
def test_extract_image_patches(sizes, strides, rates, padding) -> None:
    x = _f32(2, 5, 6, 3)
    fn = lambda a: tf.image.extract_patches(a, sizes, strides, rates, padding)  # noqa: E731
    check_lowering(fn, x)
    check_lowering(fn, x.astype(np.int32))


@pytest.mark.parametrize("radius,bias,alpha,beta", [(5, 1.0, 1.0, 0.5), (2, 2.0, 1e-3, 0.75), (1, 1.0, 0.5, 1.0)])
def test_lrn_and_its_gradient(radius: int, bias: float, alpha: float, beta: float) -> None:
    def fn(a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            y = tf.nn.local_response_normalization(a, radius, bias, alpha, beta)
            loss = tf.reduce_sum(y * tf.range(7, dtype=tf.float32))
        return y, tape.gradient(loss, a)
    check_lowering(fn, _f32(2, 3, 2, 7), rtol=1e-5, atol=1e-6)


def test_compiled_for_the_cpu() -> None:
    """One function, one build: every new op's CPU code against TF."""
    def fn(x, img, lengths, z):
        return (tf.raw_ops.Diag(diagonal=x[0]), tf.linalg.set_diag(img[0, :, :4, 0], x[0, :3] + 0.0, k=1),
                tf.reverse_sequence(img, lengths, seq_axis=1, batch_axis=0),
                tf.math.cumulative_logsumexp(x, axis=1, exclusive=True),
                tf.image.extract_patches(img, [1, 2, 2, 1], [1, 2, 1, 1], [1, 1, 1, 1], "SAME"),
                tf.nn.local_response_normalization(img, 1, 1.0, 0.5, 0.75),
                tf.raw_ops.ConjugateTranspose(x=z, perm=[1, 0]),
                tf.raw_ops.DataFormatVecPermute(x=lengths, src_format="NHWC", dst_format="NCHW"),
                tf.raw_ops.MaxPoolGradGrad(orig_input=img, orig_output=tf.nn.max_pool2d(img, 3, 2, "SAME"), grad=img * 2.0,
                                           ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME"))
    x, img = _f32(2, 5), _f32(4, 5, 6, 3)
    lengths = np.array([5, 0, 3, 1], np.int32)
    z = (_f32(2, 3) + 1j * _f32(2, 3)).astype(np.complex64)
    got = tfxla_plugin.function(fn, jit_compile=True)(x, img, lengths, z)
    want = fn(x, img, lengths, z)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"result {i}")


def _spd(*batch: int, n: int) -> np.ndarray:
    m = _f32(*batch, n, n)
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n, dtype=np.float32)).astype(np.float32)


def _well_conditioned(*batch: int, n: int) -> np.ndarray:
    """Random entries of size ~1/sqrt(n) around 2I: both triangles' solves stay well conditioned at 64x64."""
    return (_f32(*batch, n, n) / np.sqrt(n) + 2 * np.eye(n, dtype=np.float32)).astype(np.float32)


# Tolerances against TF's Eigen/LAPACK kernels (a different summation order): float32 rtol 1e-4 at 64x64
# (1e-5 up to 8x8), float64 the harness's 1e-12.
_F32_TOL = {3: 1e-5, 8: 1e-5, 64: 1e-4}


@pytest.mark.parametrize("batch,n", [((), 1), ((), 3), ((2,), 8), ((2, 1), 3), ((), 64), ((2,), 64)])
def test_cholesky(batch, n: int) -> None:
    a = _spd(*batch, n=n)
    a[..., 0, -1] = 1e6  # the upper triangle is never read
    tol = _F32_TOL.get(n, 1e-5)
    check_lowering(tf.linalg.cholesky, a, rtol=tol, atol=tol)
    check_lowering(tf.linalg.cholesky, a.astype(np.float64))


@pytest.mark.parametrize("n", [3, 8, 64])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_matrix_triangular_solve(n: int, lower: bool, adjoint: bool) -> None:
    a = _well_conditioned(2, n=n)
    a[:, -1, 0], a[:, 0, -1] = 1e6, -1e6  # the other triangle is never read
    rhs = _f32(3, 2, n, 3)  # batch dims broadcast
    fn = lambda x, y: tf.linalg.triangular_solve(x, y, lower=lower, adjoint=adjoint)  # noqa: E731
    check_lowering(fn, a, rhs, rtol=_F32_TOL[n], atol=_F32_TOL[n])
    check_lowering(fn, a.astype(np.float64), rhs.astype(np.float64))


@pytest.mark.parametrize("adjoint", [False, True])
def test_matrix_solve_and_inverse_pivot(adjoint: bool) -> None:
    a = _f32(2, 4, 4)
    a[0, 0, 0] = 0.0  # row 0 cannot be the first pivot
    a[1] = [[1e-6, 1, 2, 0], [3, 1, 0, 1], [1, 4, 1, 2], [0, 2, 5, 1]]  # a tiny leading element
    rhs = _f32(2, 4, 3)
    solve = lambda x, y: tf.linalg.solve(x, y, adjoint=adjoint)  # noqa: E731
    inverse = lambda x: tf.raw_ops.MatrixInverse(input=x, adjoint=adjoint)  # noqa: E731
    check_lowering(solve, a, rhs, rtol=1e-4, atol=1e-5)
    check_lowering(inverse, a, rtol=1e-4, atol=1e-5)
    check_lowering(solve, a.astype(np.float64), rhs.astype(np.float64), rtol=1e-10, atol=1e-12)
    check_lowering(inverse, a[1:, :1, :1].astype(np.float64))  # 1x1


@pytest.mark.parametrize("n", [3, 8, 64])
def test_matrix_solve_and_inverse_sizes(n: int) -> None:
    a, rhs = _well_conditioned(2, n=n), _f32(2, n, 2)
    a[:, 0, 0] = 0.0  # row 0 cannot be the first pivot
    for adjoint in (False, True):
        solve = lambda x, y: tf.linalg.solve(x, y, adjoint=adjoint)  # noqa: E731
        check_lowering(solve, a, rhs, rtol=10 * _F32_TOL[n], atol=10 * _F32_TOL[n])
        check_lowering(solve, a.astype(np.float64), rhs.astype(np.float64), rtol=1e-10, atol=1e-12)
    check_lowering(tf.linalg.inv, a, rtol=10 * _F32_TOL[n], atol=10 * _F32_TOL[n])
    check_lowering(tf.linalg.inv, a.astype(np.float64), rtol=1e-10, atol=1e-12)


def test_singular_and_not_positive_definite_give_nan_or_inf() -> None:
    """XLA's behaviour (TF's kernels raise): a non-PD Cholesky is NaN from the failing column on, the
    solve of a singular matrix and a zero-diagonal triangular solve are not finite."""
    a = np.diag([4.0, -1.0, 9.0]).astype(np.float32)
    got = hlo.evaluate(lower_fn(tf.linalg.cholesky, a), a)[0]
    np.testing.assert_array_equal(got[0], [2, 0, 0])
    assert np.isnan(got[1:, 1]).all() and np.isnan(got[2, 1:]).all() and got[1:, 0].tolist() == [0, 0]
    singular, rhs = np.ones((3, 3), np.float32), _f32(3, 1)
    assert not np.isfinite(hlo.evaluate(lower_fn(tf.linalg.solve, singular, rhs), singular, rhs)[0]).all()
    tri = np.tril(np.ones((3, 3), np.float32)) - np.diag([0.0, 1.0, 0.0]).astype(np.float32)
    assert not np.isfinite(hlo.evaluate(lower_fn(tf.linalg.triangular_solve, tri, rhs), tri, rhs)[0][1:]).any()


def _linalg(x, y, x64, y64):
    """Cholesky, four triangular solves (both triangles, adjoint), a pivoted solve and an inverse."""
    chol = tf.linalg.cholesky(x)
    return (tf.linalg.cholesky_solve(chol, y), tf.linalg.triangular_solve(chol, y, lower=True, adjoint=True),
            tf.linalg.solve(x, y), tf.linalg.inv(x64), tf.linalg.solve(x64, y64, adjoint=True),
            tf.linalg.triangular_solve(x64, y64, lower=False))


def test_linear_algebra_compiled_at_64_and_the_code_does_not_grow() -> None:
    """The ops are loops (one HLO while each): 64x64 compiles as fast as 3x3 and matches TF; the generated C
    at 8x8 and at 64x64 is the same text but for the numbers in it."""
    n = 64
    a, rhs = _spd(2, n=n) / n, _f32(2, n, 2)
    w, w_rhs = _well_conditioned(2, n=n).astype(np.float64), rhs.astype(np.float64)
    got = tfxla_plugin.function(_linalg, jit_compile=True)(a, rhs, w, w_rhs)
    for i, (g, want) in enumerate(zip(got, _linalg(a, rhs, w, w_rhs))):
        tol = 1e-4 if want.dtype == tf.float32 else 1e-10
        np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=tol, atol=tol, err_msg=f"result {i}")
    sources = {}
    for size in (8, 64):
        args = (_spd(2, n=size), _f32(2, size, 2), _spd(2, n=size).astype(np.float64), _f32(2, size, 2).astype(np.float64))
        source = generate(prepare(lower_fn(_linalg, *args))).source
        sources[size] = (len(source), re.sub(r"\d+", "0", source))
    assert sources[8][1] == sources[64][1], "the C differs beyond its numbers between 8x8 and 64x64"
    assert sources[64][0] < 1.02 * sources[8][0], sources


@pytest.mark.parametrize("ksize,strides,padding", [(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME")])
def test_max_pool_grad_grad(ksize: int, strides: int, padding: str) -> None:
    """Second derivative through MaxPool: exact, ties and -inf/NaN windows included."""
    x = np.round(_f32(2, 5, 6, 3) * 2) / 2  # ties
    x[0, :2, :2, 0] = -np.inf
    x[1, 1, 1, 1] = np.nan
    g = _f32(2, 5, 6, 3)

    def fn(a, b):
        y = tf.nn.max_pool2d(a, ksize, strides, padding)
        return tf.raw_ops.MaxPoolGradGrad(orig_input=a, orig_output=y, grad=b, ksize=[1, ksize, ksize, 1],
                                          strides=[1, strides, strides, 1], padding=padding)
    check_lowering(fn, x, g)
    check_lowering(fn, x.astype(np.float64), g.astype(np.float64))
    x3 = _f32(1, 4, 4, 4, 2)
    check_lowering(lambda a, b: tf.raw_ops.MaxPool3DGradGrad(orig_input=a, orig_output=tf.nn.max_pool3d(a, 2, 2, "VALID"),
                                                             grad=b, ksize=[1, 2, 2, 2, 1], strides=[1, 2, 2, 2, 1],
                                                             padding="VALID"), x3, _f32(1, 4, 4, 4, 2))
