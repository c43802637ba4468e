"""Data movement lowered to HLO and evaluated against TF eager: ConcatV2, Pack, Unpack, Split, SplitV,
Slice, Pad, PadV2, MirrorPad, ReverseV2 and StridedSlice with every mask."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin

from tests.lowering_harness import check_lowering
from tests.shape_inputs import ALL_DTYPES, dtype_id, sample

R = tf.raw_ops

# op -> (fn, input dims): swept over every dtype.
SWEEP = {
    "ConcatV2": (lambda t: tf.concat([t, t[:, :1]], -2), (3, 2, 2)),
    "Pack": (lambda t: tf.stack([t, t[::-1]], axis=1), (3, 2)),
    "Unpack": (lambda t: tf.unstack(t, axis=-1), (3, 2)),
    "Split": (lambda t: tf.split(t, 2, axis=1), (3, 4)),
    "SplitV": (lambda t: tf.split(t, [1, -1, 2], axis=-1), (2, 6)),
    "Slice": (lambda t: tf.slice(t, [1, 0, 1], [-1, 2, 2]), (3, 2, 4)),
    "StridedSlice": (lambda t: t[::-2, 1:, tf.newaxis, -1], (5, 3, 4)),
    "Pad": (lambda t: tf.pad(t, [[1, 0], [2, 3]]), (3, 2)),
    "PadV2": (lambda t: tf.pad(t, [[1, 2], [0, 1]], constant_values=t[0, 0]), (3, 2)),
    "MirrorPad": (lambda t: tf.pad(t, [[2, 1], [0, 2]], mode="REFLECT"), (3, 4)),
    "MirrorPadSymmetric": (lambda t: tf.pad(t, [[3, 1], [1, 2]], mode="SYMMETRIC"), (3, 4)),
    "ReverseV2": (lambda t: tf.reverse(t, [0, -1]), (3, 2, 4)),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", SWEEP)
def test_data_movement_dtypes(op: str, dtype) -> None:
    fn, dims = SWEEP[op]
    check_lowering(fn, sample(dtype, dims, seed=len(op)))


# (id, fn, input dims): attrs and edge shapes (rank 0, size-0 dims), float32.
CASES = [
    ("concat-axis0", lambda t: tf.concat([t, t * 2, t[:1]], 0), (2, 3)),
    ("concat-empty-piece", lambda t: tf.concat([t, t[:0]], 0), (2, 3)),
    ("concat-all-empty", lambda t: tf.concat([t, t], 1), (0, 3)),
    ("concat-int64-axis", lambda t: R.ConcatV2(values=[t, t], axis=tf.constant(-1, tf.int64)), (2, 3)),
    ("concat-v1", lambda t: R.Concat(concat_dim=1, values=[t, t[:, :1]]), (2, 3)),
    ("pack-scalars", lambda t: tf.stack([t, t, t]), ()),
    ("pack-one", lambda t: tf.stack([t], axis=-1), (2, 3)),
    ("pack-empty", lambda t: tf.stack([t, t], axis=1), (0, 3)),
    ("unpack-axis0", lambda t: tf.unstack(t), (3, 2)),
    ("unpack-to-scalars", lambda t: tf.unstack(t), (3,)),
    ("unpack-empty-rest", lambda t: tf.unstack(t, axis=1), (0, 2)),
    ("split-one", lambda t: tf.split(t, 1, axis=0), (2, 3)),
    ("split-neg-axis", lambda t: tf.split(t, 3, axis=-2), (3, 2)),
    ("split-empty", lambda t: tf.split(t, 2, axis=1), (0, 4)),
    ("splitv-zero-piece", lambda t: tf.split(t, [0, 3, -1], axis=0), (4, 2)),
    ("splitv-int64", lambda t: R.SplitV(value=t, size_splits=tf.constant([2, 1], tf.int64), axis=1,
                                        num_split=2), (2, 3)),
    ("slice-all", lambda t: tf.slice(t, [0, 0], [-1, -1]), (2, 3)),
    ("slice-empty", lambda t: tf.slice(t, [1, 3], [1, 0]), (2, 3)),
    ("slice-scalar", lambda t: tf.slice(t, tf.constant([], tf.int32), tf.constant([], tf.int32)), ()),
    ("slice-int64", lambda t: tf.slice(t, tf.constant([1, 1], tf.int64), tf.constant([1, -1], tf.int64)),
     (2, 3)),
    ("pad-scalar", lambda t: tf.pad(t, tf.zeros([0, 2], tf.int32)), ()),
    ("pad-empty", lambda t: tf.pad(t, [[1, 1], [0, 2]]), (0, 3)),
    ("pad-int64", lambda t: tf.pad(t, tf.constant([[0, 1], [2, 0]], tf.int64)), (2, 3)),
    ("padv2-zero", lambda t: tf.pad(t, [[0, 0], [0, 0]], constant_values=7.0), (2, 3)),
    ("mirror-reflect-max", lambda t: tf.pad(t, [[2, 2], [0, 0]], mode="REFLECT"), (3, 1)),
    ("mirror-symmetric-max", lambda t: tf.pad(t, [[3, 3], [1, 1]], mode="SYMMETRIC"), (3, 1)),
    ("mirror-size0-axis", lambda t: tf.pad(t, [[0, 0], [1, 1]], mode="SYMMETRIC"), (0, 3)),
    ("reverse-none", lambda t: tf.reverse(t, tf.constant([], tf.int32)), (2, 3)),
    ("reverse-empty", lambda t: tf.reverse(t, [1]), (2, 0)),
    ("reverse-int64", lambda t: tf.reverse(t, tf.constant([1], tf.int64)), (2, 3)),
]


@pytest.mark.parametrize("fn,dims", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_data_movement_cases(fn, dims) -> None:
    check_lowering(fn, sample(np.float32, dims, seed=5))


def ss(begin, end, strides, **masks):
    def fn(t):
        return R.StridedSlice(input=t, begin=tf.constant(begin, tf.int32, shape=[len(begin)]),
                              end=tf.constant(end, tf.int32, shape=[len(end)]),
                              strides=tf.constant(strides, tf.int32, shape=[len(strides)]), **masks)
    return fn


# (id, fn, input dims): each mask alone and combined, negative strides, out-of-range clamping.
STRIDED = [
    ("basic", ss([1, 0], [3, 2], [1, 1]), (4, 3)),
    ("strides", ss([0, 1], [4, 3], [2, 2]), (4, 3)),
    ("neg-stride", ss([3, 2], [0, 0], [-1, -2]), (4, 3)),
    ("neg-stride-to-start", ss([-1], [-5], [-1]), (4, 3)),
    ("neg-indices", ss([-3, -2], [-1, 3], [1, 1]), (4, 3)),
    ("clamp-high", ss([1, -10], [100, 100], [1, 1]), (4, 3)),
    ("clamp-neg-stride", ss([100], [-100], [-2]), (5, 3)),
    ("empty-wrong-direction", ss([3], [1], [1]), (4, 3)),
    ("empty-neg-wrong-direction", ss([1], [3], [-1]), (4, 3)),
    ("begin-mask", ss([2, 2], [3, 3], [1, 1], begin_mask=0b01), (4, 3)),
    ("end-mask", ss([1, 1], [2, 2], [1, 1], end_mask=0b10), (4, 3)),
    ("begin-end-mask-neg", ss([0, 0], [0, 0], [-1, -2], begin_mask=0b11, end_mask=0b11), (4, 3)),
    ("end-mask-neg-stride", ss([2], [0], [-1], end_mask=1), (4, 3)),
    ("shrink", ss([1, 2], [2, 3], [1, 1], shrink_axis_mask=0b01), (4, 3)),
    ("shrink-neg-index", ss([-1, -1], [0, 0], [1, 1], shrink_axis_mask=0b11), (4, 3)),
    ("shrink-ignores-begin-mask", ss([2], [0], [1], shrink_axis_mask=1, begin_mask=1), (4, 3)),
    ("shrink-stride-2", ss([1], [0], [2], shrink_axis_mask=1), (4, 3)),
    ("new-axis", ss([0, 1], [0, 3], [1, 1], new_axis_mask=0b01), (4, 3)),
    ("new-axis-only", ss([0], [0], [1], new_axis_mask=1), (4, 3)),
    ("new-axis-scalar", ss([0, 0], [0, 0], [1, 1], new_axis_mask=0b11), ()),
    ("ellipsis-first", ss([0, 1], [0, 3], [1, 1], ellipsis_mask=0b01), (2, 3, 4)),
    ("ellipsis-middle", ss([1, 0, -1], [2, 0, 0], [1, 1, -1], ellipsis_mask=0b010), (3, 2, 2, 4)),
    ("ellipsis-empty-range", ss([0, 0, 1], [1, 0, 2], [1, 1, 1], ellipsis_mask=0b010), (2, 3)),
    ("ellipsis-new-axis-after", ss([0, 0, 1], [0, 0, 3], [1, 1, 1], ellipsis_mask=0b001, new_axis_mask=0b010),
     (2, 3, 4)),
    ("ellipsis-shrink", ss([0, -1], [0, 0], [1, 1], ellipsis_mask=0b01, shrink_axis_mask=0b10), (2, 3, 4)),
    ("ellipsis-and-new-axis-bit", ss([0], [0], [1], ellipsis_mask=1, new_axis_mask=1), (2, 3)),
    ("all-masks", ss([0, 1, 0, 2, 0], [0, 3, 0, 0, 0], [1, 1, 1, -1, 1], begin_mask=0b00001,
                     end_mask=0b01000, ellipsis_mask=0b00100, new_axis_mask=0b10000, shrink_axis_mask=0b00000),
     (2, 4, 3, 5)),
    ("shrink-and-new", ss([1, 0, 2], [2, 0, 3], [1, 1, 1], new_axis_mask=0b010, shrink_axis_mask=0b101),
     (4, 3)),
    ("size0-dim", ss([0, 1], [0, 2], [1, 1]), (0, 3)),
    ("size0-neg-stride", ss([0], [0], [-1], begin_mask=1, end_mask=1), (0, 3)),
    ("python-getitem", lambda t: t[1:, ..., ::-1, tf.newaxis, 0], (3, 2, 4, 2)),
    ("shape-index", lambda t: tf.shape(t)[-1] + tf.zeros([2], tf.int32), (3, 5)),
]


@pytest.mark.parametrize("fn,dims", [c[1:] for c in STRIDED], ids=[c[0] for c in STRIDED])
def test_strided_slice(fn, dims) -> None:
    check_lowering(fn, sample(np.float32, dims, seed=6))


def test_strided_slice_int64_spec() -> None:
    def fn(t):
        return R.StridedSlice(input=t, begin=tf.constant([-1, 0], tf.int64), end=tf.constant([0, 3], tf.int64),
                              strides=tf.constant([-1, 2], tf.int64), end_mask=1)
    check_lowering(fn, sample(np.float32, (4, 3), seed=7))


def test_mirror_pad_past_the_dimension_raises_invalid_argument_like_tf_eager() -> None:
    """REFLECT needs paddings < the dimension (0 < 0 fails on an empty one): TF eager raises
    InvalidArgumentError, and so does the compiled function (it raised a bare LoweringError)."""
    fn = lambda t: tf.pad(t, [[0, 0], [1, 1]], mode="REFLECT") * 2  # noqa: E731
    x = tf.zeros((0, 3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="paddings must be less than the dimension size"):
        fn(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="node 'MirrorPad'.*must be less than the dimension"):
        tfxla_plugin.function(fn, jit_compile=True)(x)
