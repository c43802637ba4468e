"""Cumsum, Cumprod, TopKV2 and Einsum lowered to HLO and evaluated against TF eager."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering import LoweringError
from tests.lowering_harness import check_lowering, lower_fn
from tests.shape_inputs import FLOAT_DTYPES, NUMERIC_DTYPES, dtype_id, sample

R = tf.raw_ops
SCANS = {"Cumsum": tf.cumsum, "Cumprod": tf.math.cumprod}


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", SCANS)
def test_scan_dtypes(op: str, dtype) -> None:
    x = sample(dtype, (3, 4), seed=1, low=-3, high=4)  # small ints: products overflow (and wrap) less
    check_lowering(lambda t: SCANS[op](t, axis=1), x)


# (exclusive, reverse, axis, dims)
SCAN_ATTRS = [
    (False, False, 0, (4, 3)),
    (True, False, 0, (4, 3)),
    (False, True, 0, (4, 3)),
    (True, True, 0, (4, 3)),
    (True, True, -1, (2, 5)),
    (True, False, 1, (2, 1)),
    (True, True, 0, (1,)),
    (False, False, 1, (2, 0)),
    (True, False, -1, (0, 3)),
    (False, True, 2, (2, 3, 4)),
]


@pytest.mark.parametrize("op", SCANS)
@pytest.mark.parametrize("exclusive,reverse,axis,dims", SCAN_ATTRS)
def test_scan_attrs(op: str, exclusive: bool, reverse: bool, axis: int, dims) -> None:
    x = sample(np.float32, dims, seed=2, specials=False) / 2
    check_lowering(lambda t: SCANS[op](t, axis=axis, exclusive=exclusive, reverse=reverse), x)


def test_scan_int64_axis_and_specials() -> None:
    x = np.array([[1.0, np.nan, 2.0], [np.inf, -1.0, -np.inf], [0.0, -0.0, 3.0]], np.float32)
    check_lowering(lambda t: (tf.cumsum(t, axis=tf.constant(1, tf.int64)), tf.math.cumprod(t, axis=0)), x)


def test_scan_is_one_reduce_window() -> None:
    module = check_lowering(lambda t: tf.cumsum(t, axis=0, exclusive=True), sample(np.float32, (5,), seed=3))
    opcodes = [i.opcode for i in module.entry.instructions]
    assert opcodes.count(hlo.Opcode.REDUCE_WINDOW) == 1


def topk_input(dtype, dims, seed):
    """Values with ties, +-inf and -0.0 (no NaN: TF's order for NaN is unspecified)."""
    x = sample(dtype, dims, seed=seed, specials=False, low=-4, high=5)
    if np.dtype(dtype) in FLOAT_DTYPES:
        x = np.round(x).astype(dtype)  # ties
        flat = x.reshape(-1)
        flat[: min(3, flat.size)] = np.array([np.inf, -np.inf, -0.0])[: min(3, flat.size)]
    return x


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_top_k_dtypes(dtype) -> None:
    check_lowering(lambda t: tf.math.top_k(t, 3), topk_input(dtype, (3, 6), seed=4))


TOPK_CASES = [
    ("k-all", 5, (2, 5)),
    ("k-zero", 0, (2, 5)),
    ("k-one", 1, (4, 5)),
    ("rank1", 2, (7,)),
    ("rank3", 2, (2, 3, 4)),
    ("empty-lead", 1, (0, 3)),
    ("empty-row-k0", 0, (2, 0)),
    ("all-ties", 3, (1, 6)),
]


@pytest.mark.parametrize("k,dims", [c[1:] for c in TOPK_CASES], ids=[c[0] for c in TOPK_CASES])
def test_top_k_cases(k: int, dims) -> None:
    x = topk_input(np.float32, dims, seed=5)
    if dims == (1, 6):
        x = np.array([[1.0, 0.0, -0.0, 1.0, 0.0, 1.0]], np.float32)
    check_lowering(lambda t: tf.math.top_k(t, k), x)


@pytest.mark.parametrize("index_type", [tf.int16, tf.int64], ids=["int16", "int64"])
def test_top_k_index_type(index_type) -> None:
    check_lowering(lambda t: R.TopKV2(input=t, k=2, index_type=index_type), topk_input(np.float32, (3, 4), 6))


def test_top_k_unsorted_gives_the_same_set() -> None:
    """TF leaves the order of ``sorted=False`` unspecified; the lowering returns it sorted."""
    x = topk_input(np.float32, (3, 8), seed=7)
    module = lower_fn(lambda t: tf.math.top_k(t, 4, sorted=False), x)
    values, indices = hlo.evaluate(module, x)
    want_v, want_i = tf.math.top_k(x, 4, sorted=False)
    np.testing.assert_array_equal(np.sort(values, -1), np.sort(want_v.numpy(), -1))
    np.testing.assert_array_equal(np.sort(indices, -1), np.sort(want_i.numpy(), -1))


def test_top_k_sorts_with_an_iota_and_a_comparator() -> None:
    module = check_lowering(lambda t: tf.math.top_k(t, 2), topk_input(np.float32, (2, 5), seed=8))
    sort = next(i for i in module.entry.instructions if i.opcode == hlo.Opcode.SORT)
    assert len(sort.operands) == 2 and module.entry[sort.operands[1]].opcode == hlo.Opcode.IOTA


EINSUM_DTYPES = FLOAT_DTYPES + [np.dtype(np.int32), np.dtype(np.int64)]


@pytest.mark.parametrize("dtype", EINSUM_DTYPES, ids=dtype_id)
def test_einsum_dtypes(dtype) -> None:
    a = sample(dtype, (2, 3, 4), seed=9, specials=False, low=-5, high=6)
    b = sample(dtype, (2, 4, 5), seed=10, specials=False, low=-5, high=6)
    check_lowering(lambda x, y: (tf.einsum("bij,bjk->bik", x, y), tf.einsum("bij->jb", x)), a, b)


# (equation, operand dims...)
EINSUMS = [
    ("ij,jk->ik", (2, 3), (3, 4)),
    ("ij,kj->ik", (2, 3), (4, 3)),
    ("bij,bjk->bik", (2, 2, 3), (2, 3, 4)),
    ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)),
    ("bqhd,bkhd->bhqk", (1, 3, 2, 4), (1, 5, 2, 4)),
    ("ij->ji", (2, 3)),
    ("abc->cab", (2, 3, 4)),
    ("ij->", (2, 3)),
    ("ij->j", (2, 3)),
    ("i,i->", (4,), (4,)),
    ("i,j->ij", (2,), (3,)),
    ("ab,ab->ab", (2, 3), (2, 3)),
    ("abc,cd->abd", (2, 3, 4), (4, 5)),
    ("ij,jk->ki", (2, 3), (3, 4)),
    ("ij,kl->i", (2, 3), (3, 4)),
    ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
    ("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2)),
    ("...ij->...ji", (2, 3, 4)),
    ("...j,j->...", (2, 3), (3,)),
    ("i...,i...->...", (3, 2), (3, 1)),
    (",i->i", (), (3,)),
    ("ii->i", (3, 3)),
    ("ii->", (3, 3)),
    ("iij,j->i", (3, 3, 2), (2,)),
    ("ij,jj->i", (2, 3), (3, 3)),
    ("aij->aii", (2, 3, 3)),
    ("ij,jk->ik", (0, 3), (3, 2)),
    ("ij,jk->ik", (2, 0), (0, 3)),
]


@pytest.mark.parametrize("case", EINSUMS, ids=lambda c: c[0] if isinstance(c, str) else None)
def test_einsum_equations(case) -> None:
    equation, *dims = case
    args = [sample(np.float32, d, seed=11 + i, specials=False) for i, d in enumerate(dims)]
    check_lowering(lambda *ts: R.Einsum(inputs=list(ts), equation=equation), *args, rtol=1e-5, atol=1e-5)


def test_einsum_nan_and_inf_propagate() -> None:
    a = np.array([[1.0, np.nan], [np.inf, 2.0]], np.float32)
    b = np.array([[1.0, 0.5], [2.0, -np.inf]], np.float32)
    check_lowering(lambda x, y: tf.einsum("ij,jk->ik", x, y), a, b)


def test_einsum_output_label_missing_from_inputs_is_rejected() -> None:
    """TF's shape inference rejects this at trace time; a hand-edited graph still fails cleanly here."""
    from hlo.lowering import InputSpec, lower_graph

    cf = tf.function(lambda t: tf.einsum("ij->ij", t)).get_concrete_function(tf.TensorSpec([2, 3], tf.float32))
    gd = cf.graph.as_graph_def()
    node = next(n for n in gd.node if n.op == "Einsum")
    node.attr["equation"].s = b"ij->ijk"
    with pytest.raises(LoweringError, match="output label 'k' does not appear"):
        lower_graph(gd, [InputSpec(cf.graph.inputs[0].name, 1, (2, 3))], [cf.graph.outputs[0].name])
