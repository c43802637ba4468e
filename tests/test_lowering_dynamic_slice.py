"""Slices at run-time offsets (Keras ``RandomCrop``, ``tf.image.random_crop``, ``x[i]`` with a tensor ``i``):
``StridedSlice``/``Slice``/``StridedSliceGrad`` with a run-time begin lower to ``dynamic-slice`` /
``dynamic-update-slice`` of static sizes, and ``x[b:b + c]`` gets its static size from
``graph_passes/fold_shapes.py``. Results equal TF exactly (data movement: no rounding) for every
in-range offset, including the last one."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from graph_passes.fold_shapes import fold_shapes
from graph_passes.mark import analysis_graph
from hlo.lowering.errors import LoweringError
from tests.lowering_harness import check_lowering, lower_fn

X = np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3)


@pytest.mark.parametrize("b", [0, 2, 3, -1, -5])
def test_shrink_at_run_time_index(b: int) -> None:
    check_lowering(lambda x, i: x[:, i] * 2, X, np.int32(b))
    check_lowering(lambda x, i: x[i, ..., 1], X, np.int64(b % 2))


@pytest.mark.parametrize("begin", [(0, 0, 0, 0), (1, 2, 3, 1), (0, 3, 4, 2)])
def test_slice_at_run_time_begin(begin) -> None:
    check_lowering(lambda x, b: tf.slice(x, b, [1, 2, 2, 1]) + 1, X, np.array(begin, np.int32))


def test_random_crop_and_its_gradient_compiled_match_tf() -> None:
    """``x[:, h:h + 3, w:w + 2, :]`` with run-time ``h``, ``w``: static shape through the fold pass,
    a dynamic-slice forward and a dynamic-update-slice gradient, at several offsets (the last in range)."""
    def fn(x, h, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x[:, h:h + 3, w:w + 2, :]
            loss = tf.reduce_sum(y * y)
        return y * 2.0, tape.gradient(loss, x)
    compiled = tfxla_plugin.function(fn, jit_compile=True)
    for h, w in [(0, 0), (1, 3), (2, 4)]:
        args = (tf.constant(X), tf.constant(h), tf.constant(w))
        for got, want in zip(compiled(*args), fn(*args)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_fold_gives_the_slice_its_static_size() -> None:
    def fn(x, h):
        return x[:, h:h + 3, 1:, :] * 2.0
    gd = tf.function(fn).get_concrete_function(tf.TensorSpec(X.shape), tf.TensorSpec((), tf.int32)).graph.as_graph_def()
    result = fold_shapes(gd, analysis_graph(gd))
    (name,) = result.sized
    assert result.sized[name] == [2, 3, 5, 3]
    graph = analysis_graph(result.graph_def)
    assert graph.get_tensor_by_name(f"{name}:0").shape.as_list() == [2, 3, 5, 3]
    assert not fold_shapes(gd, analysis_graph(gd)).folded, "only sized, nothing folded"


def test_run_time_begin_with_a_stride_is_refused() -> None:
    fn = lambda x, b: tf.strided_slice(x, tf.stack([b]), tf.stack([b + 2]), [2])  # noqa: E731
    with pytest.raises(LoweringError, match="a strided slice with a run-time begin needs stride 1, got 2"):
        lower_fn(fn, X, np.int32(0))


def test_run_time_begin_without_a_static_size_is_refused() -> None:
    fn = lambda x, b: tf.strided_slice(x, tf.stack([b]), tf.stack([b + 2]), [1])  # noqa: E731  (not folded here)
    with pytest.raises(LoweringError, match="needs a static slice size in dim 0 .end = begin . a constant., got unknown"):
        lower_fn(fn, X, np.int32(0))


@pytest.mark.parametrize("i", [0, 3, -2])
def test_run_time_index_with_a_strided_full_dim_and_its_gradient(i: int) -> None:
    """``x[::2, i]`` / ``x[::-3, i]``: the fully masked dims keep their strides around the dynamic slice."""
    def fn(x, k):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x[::2, k] * 3.0 + x[::-3, k + 1]
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, x)
    check_lowering(fn, X, np.int32(i))
