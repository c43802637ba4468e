"""Indexing ops lowered to HLO and evaluated against TF eager: GatherV2 (axis, batch_dims), GatherNd,
ScatterNd, TensorScatterUpdate/Add/Sub/Max/Min, OneHot. Out-of-range gather indices and scatter index
rows raise TF's own InvalidArgumentError message (the lowered gathers and scatters carry TF's
``index_check``); with ``bad_indices_policy=IGNORE`` a scatter skips bad rows as TF does, and a
GatherNd with it (zeros for bad rows) is refused."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering.errors import LoweringError
from tests.lowering_harness import check_lowering, lower_fn
from tests.shape_inputs import ALL_DTYPES, NUMERIC_DTYPES, dtype_id, sample

R = tf.raw_ops

# op -> (fn, input dims): swept over every dtype.
SWEEP = {
    "GatherV2": (lambda t: tf.gather(t, [[2, 0], [1, 1]], axis=1), (2, 3, 2)),
    "GatherV2-batch": (lambda t: tf.gather(t, [[2, 0], [1, 1]], axis=1, batch_dims=1), (2, 3, 2)),
    "GatherNd": (lambda t: tf.gather_nd(t, [[1, 2], [0, 0], [1, 0]]), (2, 3, 2)),
    "ScatterNd": (lambda t: tf.scatter_nd([[1], [3], [1]], t, [5, 2]), (3, 2)),
    "TensorScatterUpdate": (lambda t: tf.tensor_scatter_nd_update(t, [[1, 0], [2, 1]], t[0]), (3, 2)),
    "OneHot": (lambda t: tf.one_hot([[0, 3], [-1, 2]], 3, on_value=t[0], off_value=t[1], axis=1), (2,)),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", SWEEP)
def test_indexing_dtypes(op: str, dtype) -> None:
    fn, dims = SWEEP[op]
    check_lowering(fn, sample(dtype, dims, seed=len(op)))


TENSOR_SCATTER = {
    "TensorScatterAdd": tf.tensor_scatter_nd_add,
    "TensorScatterSub": tf.tensor_scatter_nd_sub,
    "TensorScatterMax": tf.tensor_scatter_nd_max,
    "TensorScatterMin": tf.tensor_scatter_nd_min,
}


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", TENSOR_SCATTER)
def test_tensor_scatter_combiners_with_duplicates(op: str, dtype) -> None:
    scatter = TENSOR_SCATTER[op]
    x, u = sample(dtype, (4, 3), seed=1, low=-9, high=10), sample(dtype, (3, 3), seed=2, low=-9, high=10)
    check_lowering(lambda t, v: scatter(t, [[2], [0], [2]], v), x, u)


I32, I64 = tf.int32, tf.int64

# (id, fn, input dims), float32.
CASES = [
    ("gather-axis0", lambda t: tf.gather(t, [3, 0, 0]), (4, 2)),
    ("gather-axis-neg", lambda t: tf.gather(t, [[1], [0]], axis=-1), (3, 2)),
    ("gather-scalar-index", lambda t: tf.gather(t, 2, axis=1), (2, 3, 2)),
    ("gather-int64", lambda t: tf.gather(t, tf.constant([1, 0], I64), axis=tf.constant(1, I64)), (2, 3)),
    ("gather-empty-indices", lambda t: tf.gather(t, tf.zeros([0, 2], I32), axis=1), (2, 3)),
    ("gather-empty-params", lambda t: tf.gather(t, [1, 1], axis=1), (0, 3)),
    ("gather-rank1", lambda t: tf.gather(t, [[4, 0], [2, 2]]), (5,)),
    ("gather-batch-axis-after", lambda t: tf.gather(t, [[3, 0], [1, 1]], axis=2, batch_dims=1), (2, 3, 4)),
    ("gather-batch2", lambda t: tf.gather(t, [[[1], [0]], [[0], [1]]], axis=2, batch_dims=2), (2, 2, 2, 3)),
    ("gather-batch-neg", lambda t: tf.gather(t, [[2, 0, 1], [1, 1, 0]], axis=1, batch_dims=-1), (2, 3)),
    ("gather-batch-trailing-dims", lambda t: tf.gather(t, [[1], [0]], axis=1, batch_dims=1), (2, 3, 2)),
    ("gathernd-full-index", lambda t: tf.gather_nd(t, [[1, 2, 0], [0, 0, 1]]), (2, 3, 2)),
    ("gathernd-single-vector", lambda t: tf.gather_nd(t, [1, 2]), (2, 3, 2)),
    ("gathernd-batched", lambda t: tf.gather_nd(t, [[[1], [0]], [[0], [0]]]), (2, 3)),
    ("gathernd-depth0", lambda t: tf.gather_nd(t, tf.zeros([2, 0], I32)), (2, 3)),
    ("gathernd-int64", lambda t: tf.gather_nd(t, tf.constant([[0, 1]], I64)), (2, 3)),
    ("gathernd-empty", lambda t: tf.gather_nd(t, tf.zeros([0, 1], I32)), (2, 3)),
    ("scatternd-elements", lambda t: tf.scatter_nd([[0, 1], [2, 2], [0, 1]], t, [3, 4]), (3,)),
    ("scatternd-empty-updates", lambda t: tf.scatter_nd(tf.zeros([0, 1], I32), t, [4, 2]), (0, 2)),
    ("scatternd-int64", lambda t: tf.scatter_nd(tf.constant([[1]], I64), t, tf.constant([3, 2], I64)), (1, 2)),
    ("tensor-scatter-slices", lambda t: tf.tensor_scatter_nd_update(t, [[2], [0]], t[:2] * 10), (3, 2, 2)),
    ("tensor-scatter-full", lambda t: tf.tensor_scatter_nd_update(t, [[1, 1, 0]], [7.0]), (3, 2, 2)),
    ("onehot-default", lambda t: tf.one_hot([0, 2, 5], 4) + t, ()),
    ("onehot-axis0", lambda t: tf.one_hot([[1, 0], [2, 2]], 3, on_value=t, off_value=-t, axis=0), ()),
    ("onehot-scalar-index", lambda t: tf.one_hot(1, 3, on_value=t, off_value=0.5), ()),
    ("onehot-int64", lambda t: tf.one_hot(tf.constant([3, -1], I64), 4, on_value=t, off_value=0.0), ()),
    ("onehot-uint8", lambda t: tf.one_hot(tf.constant([3, 200], tf.uint8), 201, on_value=t, off_value=0.0), ()),
    ("onehot-depth0", lambda t: tf.one_hot([1, 0], 0, on_value=t, off_value=0.0), ()),
    ("onehot-empty", lambda t: tf.one_hot(tf.zeros([0, 2], I32), 3, on_value=t, off_value=1.0, axis=1), ()),
]


@pytest.mark.parametrize("fn,dims", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_indexing_cases(fn, dims) -> None:
    check_lowering(fn, sample(np.float32, dims, seed=8))


def _tf_message(fn, *args) -> str:
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        fn(*[tf.constant(a) for a in args])
    return info.value.message


# (id, fn(params, indices), params dims, indices, the key part of TF's message)
_OUT_OF_RANGE = [
    ("gather-high", lambda p, i: tf.gather(p, i), (3, 4), [0, 5], "indices[1] = 5 is not in [0, 3)"),
    ("gather-negative-2d", lambda p, i: tf.gather(p, i, axis=1), (3, 4), [[0, 1], [-1, 2]],
     "indices[1,0] = -1 is not in [0, 4)"),
    ("gather-batch", lambda p, i: tf.gather(p, i, axis=1, batch_dims=1), (3, 4), [[0, 9], [1, 1], [2, 2]],
     "indices[0,1] = 9 is not in [0, 4)"),
    ("gather-empty-params", lambda p, i: tf.gather(p, i), (0, 4), [0], "indices[0] = 0 is not in [0, 0)"),
    ("gather-int64-huge", lambda p, i: tf.gather(p, i), (3, 4), np.array([2**40], np.int64),
     "indices[0] = 1099511627776 is not in [0, 3)"),
    ("gathernd-row", lambda p, i: tf.gather_nd(p, i), (3, 4), [[0, 1], [3, 0]],
     "indices[1] = [3, 0] does not index into param shape [3,4]"),
    ("gathernd-batched-negative", lambda p, i: tf.gather_nd(p, i), (3, 4), [[[0], [-5]]],
     "indices[0,1] = [-5] does not index into param shape [3,4]"),
    ("gathernd-empty-params", lambda p, i: tf.gather_nd(p, i), (3, 0), [[1]],
     "Requested more than 0 entries, but params is empty.  Params shape: [3,0]"),
]


@pytest.mark.parametrize("fn,dims,indices,key", [c[1:] for c in _OUT_OF_RANGE], ids=[c[0] for c in _OUT_OF_RANGE])
def test_out_of_range_gather_raises_tf_message(fn, dims, indices, key) -> None:
    params = sample(np.float32, dims, seed=3)
    indices = np.asarray(indices, np.int64 if np.asarray(indices).dtype == np.int64 else np.int32)
    assert key in _tf_message(fn, params, indices)
    module = lower_fn(fn, params, indices)
    with pytest.raises(hlo.HloInvalidArgumentError) as info:
        hlo.evaluate(module, params, indices)
    assert str(info.value).startswith(key), str(info.value)


@pytest.mark.parametrize("fn,dims,indices", [
    (lambda p, i: tf.gather(p, i), (3, 0), [7]),  # an empty result: TF checks nothing
    (lambda p, i: tf.gather(p, i), (0, 4), np.zeros([0], np.int32)),
    (lambda p, i: tf.gather_nd(p, i), (0, 4), np.zeros([0, 1], np.int32)),
], ids=["gather-empty-slices", "gather-no-indices", "gathernd-no-rows"])
def test_empty_gathers_match_tf(fn, dims, indices) -> None:
    check_lowering(fn, sample(np.float32, dims, seed=4), np.asarray(indices, np.int32))


R_SCATTER = [
    ("scatter-nd-int64-huge", lambda i, u: tf.scatter_nd(i, u, tf.constant([4], I64)), np.array([[2**40]], np.int64),
     [1.0], "indices[0] = [1099511627776] does not index into shape [4]"),
    ("sub-batched-last-bad", lambda i, u: tf.tensor_scatter_nd_sub(tf.ones([3, 2]), i, u), [[[3, 0], [0, 0]],
     [[1, 1], [0, -2]]], np.ones((2, 2), np.float32), "indices[1,1] = [0, -2] does not index into shape [3,2]"),
]


@pytest.mark.parametrize("fn,indices,updates,key", [c[1:] for c in R_SCATTER], ids=[c[0] for c in R_SCATTER])
def test_out_of_range_scatter_raises_tf_message(fn, indices, updates, key) -> None:
    indices = np.asarray(indices, np.int64 if np.asarray(indices).dtype == np.int64 else np.int32)
    updates = np.asarray(updates, np.float32)
    assert key in _tf_message(fn, indices, updates)
    module = lower_fn(fn, indices, updates)
    with pytest.raises(hlo.HloInvalidArgumentError) as info:
        hlo.evaluate(module, indices, updates)
    assert str(info.value).startswith(key + "\n"), str(info.value)


def test_bad_indices_policy_ignore_skips_bad_scatter_rows_like_tf() -> None:
    def fn(t, i, u):
        return R.TensorScatterAdd(tensor=t, indices=i, updates=u, bad_indices_policy="IGNORE")
    check_lowering(fn, np.zeros(4, np.float32), np.array([[7], [1], [-1], [1]], np.int32),
                   np.array([1, 2, 3, 4], np.float32))


def test_gather_nd_bad_indices_policy_ignore_is_refused() -> None:
    def fn(p, i):
        return R.GatherNd(params=p, indices=i, bad_indices_policy="IGNORE")
    with pytest.raises(LoweringError, match="bad_indices_policy=IGNORE .* is not supported"):
        lower_fn(fn, np.zeros(3, np.float32), np.array([[7]], np.int32))
