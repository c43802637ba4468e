"""sort and topk in the evaluator, against real XLA (single ops taken from XLA's own HLO) and
NumPy. Plain LT/GT comparators take the argsort fast path and need no other rule; the
lexicographic comparator test drives the generic merge sort through compare/and/or rules."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
from tensorflow.compiler.tf2xla.python import xla  # noqa: E402

import hlo  # noqa: E402
from hlo.evaluator.sorting import merge_sort_order  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402
from tests.xla_oracle import assert_close, evaluate_single, scalar_fn  # noqa: E402

RNG = np.random.default_rng(5)


def sort_module(types: list[str], dims: str, dim: int, compare: str, stable: bool = True) -> hlo.HloModule:
    params = ", ".join(f"{c}{k}: {t}[]" for k, t in enumerate(types) for c in "lr")
    body = "\n".join(f"  %{c}{k} = {t}[] parameter({2 * k + (c == 'r')})" for k, t in enumerate(types) for c in "lr")
    shapes = [f"{t}[{dims}]" for t in types]
    entry_params = ", ".join(f"x{k}: {s}" for k, s in enumerate(shapes))
    operands = ", ".join(f"{s} %x{k}" for k, s in enumerate(shapes))
    out = shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
    return hlo.parse_module(f"""
HloModule m
%cmp ({params}) -> pred[] {{
{body}
  ROOT %c = pred[] {compare}
}}
ENTRY %main ({entry_params}) -> {out} {{
""" + "\n".join(f"  %x{k} = {s} parameter({k})" for k, s in enumerate(shapes)) + f"""
  ROOT %s = {out} sort({operands}), dimensions={{{dim}}}, is_stable={str(stable).lower()}, to_apply=%cmp
}}
""")


# --- against XLA -------------------------------------------------------------------------------


def test_key_value_sort_against_xla():
    k = RNG.integers(0, 4, (3, 9)).astype(np.float32)
    k[0, 3], k[1, 1], k[2, 0] = np.nan, -np.nan, -0.0
    v = RNG.standard_normal((3, 9)).astype(np.float32)
    got, want = evaluate_single(lambda k, v: xla.key_value_sort(k, v), [k, v], Opcode.SORT)
    assert_close(got, want, 0, 0)


@pytest.mark.parametrize("direction,dtype", [("ASCENDING", np.float32), ("DESCENDING", np.int32)])
def test_tf_argsort_stable_with_duplicates(direction, dtype):
    x = RNG.integers(-3, 3, (4, 11)).astype(dtype)
    got, want = evaluate_single(lambda x: tf.argsort(x, axis=1, direction=direction, stable=True), [x], Opcode.SORT)
    np.testing.assert_array_equal(got[1], want[0])


def test_top_k_sort_against_xla():
    x = RNG.standard_normal((3, 10)).astype(np.float32)
    x[1, 4] = x[1, 7] = 5.0  # a tie: the lower index first
    got, want = evaluate_single(lambda x: tf.math.top_k(x, k=4), [x], Opcode.SORT)
    np.testing.assert_array_equal(got[0][:, :4], want[0])
    np.testing.assert_array_equal(got[1][:, :4], want[1])


def test_lexicographic_comparator_generic_merge_sort_against_xla():
    keys = RNG.integers(0, 3, (2, 13)).astype(np.float32)
    vals = RNG.integers(0, 4, (2, 13)).astype(np.int32)

    def less(a, b, c, d):  # by key ascending, then by value descending
        return tf.logical_or(a < b, tf.logical_and(tf.equal(a, b), c > d))

    def fn(k, v):
        return xla.variadic_sort([k, v], 1, scalar_fn(less, tf.float32, tf.float32, tf.int32, tf.int32), True)
    got, want = evaluate_single(fn, [keys, vals], Opcode.SORT)
    assert_close(got, want, 0, 0)


# --- semantics ---------------------------------------------------------------------------------


def test_total_order_sorts_nans_and_signed_zeros():
    x = np.array([np.nan, 1.0, -0.0, -np.inf, 0.0, -np.nan, np.inf, 1.0, -2.5], np.float32)
    m = sort_module(["f32"], "9", 0, "compare(f32[] %l0, f32[] %r0), direction=LT, type=TOTALORDER")
    (got,) = hlo.evaluate(m, x)
    want_bits = np.array([-np.nan, -np.inf, -2.5, -0.0, 0.0, 1, 1, np.inf, np.nan], np.float32).view(np.uint32)
    np.testing.assert_array_equal(got.view(np.uint32), want_bits)
    m = sort_module(["f32"], "9", 0, "compare(f32[] %l0, f32[] %r0), direction=GT, type=TOTALORDER")
    (got,) = hlo.evaluate(m, x)
    np.testing.assert_array_equal(got.view(np.uint32), want_bits[::-1])


def test_float_compare_puts_nans_last_and_keeps_zeros_stable():
    x = np.array([0.0, np.nan, -0.0, 2.0, -1.0], np.float32)
    m = sort_module(["f32", "s32"], "5", 0, "compare(f32[] %l0, f32[] %r0), direction=LT")
    vals, idx = hlo.evaluate(m, x, np.arange(5, dtype=np.int32))
    np.testing.assert_array_equal(idx, [4, 0, 2, 3, 1])
    m = sort_module(["f32", "s32"], "5", 0, "compare(f32[] %r0, f32[] %l0), direction=LT")  # descending
    vals, idx = hlo.evaluate(m, x, np.arange(5, dtype=np.int32))
    np.testing.assert_array_equal(idx, [3, 0, 2, 4, 1])


def test_sort_by_second_operand_along_dim_0():
    a = RNG.standard_normal((6, 3)).astype(np.float32)
    b = RNG.integers(0, 3, (6, 3)).astype(np.uint8)
    m = sort_module(["f32", "u8"], "6,3", 0, "compare(u8[] %l1, u8[] %r1), direction=GT")
    ga, gb = hlo.evaluate(m, a, b)
    order = np.argsort(-b.astype(np.int64), axis=0, kind="stable")
    np.testing.assert_array_equal(ga, np.take_along_axis(a, order, 0))
    np.testing.assert_array_equal(gb, np.take_along_axis(b, order, 0))


def test_sort_empty_and_single():
    m = sort_module(["s32"], "0,4", 1, "compare(s32[] %l0, s32[] %r0), direction=LT")
    (got,) = hlo.evaluate(m, np.zeros((0, 4), np.int32))
    assert got.shape == (0, 4)
    m = sort_module(["pred"], "3,1", 1, "compare(pred[] %l0, pred[] %r0), direction=LT")
    (got,) = hlo.evaluate(m, np.array([[True], [False], [True]]))
    np.testing.assert_array_equal(got, [[True], [False], [True]])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 13, 64, 100])
def test_merge_sort_is_stable_and_matches_argsort(n):
    keys = RNG.integers(0, 5, (4, n))

    def less(lhs, rhs):
        return lhs[0] < rhs[0]
    order = merge_sort_order(less, [keys]) if n else np.zeros((4, 0), np.int64)
    np.testing.assert_array_equal(order, np.argsort(keys, axis=1, kind="stable"))


# --- topk opcode -------------------------------------------------------------------------------


def topk_module(t: str, dims: str, out: str, k: int, largest: bool) -> hlo.HloModule:
    return hlo.parse_module(f"""
HloModule m
ENTRY %main (x: {t}[{dims}]) -> ({t}[{out}], s32[{out}]) {{
  %x = {t}[{dims}] parameter(0)
  ROOT %t = ({t}[{out}], s32[{out}]) topk({t}[{dims}] %x), k={k}, largest={str(largest).lower()}
}}
""")


def test_topk_matches_tf_top_k():
    x = RNG.standard_normal((4, 12)).astype(np.float32)
    x[2, 3] = x[2, 9] = 9.0
    vals, idx = hlo.evaluate(topk_module("f32", "4,12", "4,5", 5, True), x)
    want = tf.math.top_k(x, k=5)
    np.testing.assert_array_equal(vals, want.values.numpy())
    np.testing.assert_array_equal(idx, want.indices.numpy())


def test_topk_smallest_nan_and_integers():
    x = np.array([3.0, np.nan, -1.0, 3.0, -np.inf], np.float32)
    vals, idx = hlo.evaluate(topk_module("f32", "5", "3", 3, True), x)
    np.testing.assert_array_equal(idx, [1, 0, 3])  # NaN is largest in the total order
    vals, idx = hlo.evaluate(topk_module("f32", "5", "2", 2, False), x)
    np.testing.assert_array_equal(idx, [4, 2])
    xi = np.array([[5, -7, 5, 0]], np.int32)
    vals, idx = hlo.evaluate(topk_module("s32", "1,4", "1,4", 4, True), xi)
    np.testing.assert_array_equal(vals, [[5, 5, 0, -7]])
    np.testing.assert_array_equal(idx, [[0, 2, 3, 1]])


def test_total_order_key_keeps_dims():
    from hlo.evaluator.callees import total_order_key
    assert total_order_key(np.float32(-1.0)).shape == ()
    keys = total_order_key(np.array([-np.nan, -np.inf, -0.0, 0.0, np.inf, np.nan], np.float16))
    assert keys.dtype == np.int16 and np.all(np.diff(keys.astype(np.int64)) > 0)


def test_sort_over_an_empty_dimension_with_a_generic_comparator() -> None:
    import hlo

    m = hlo.parse_module("""HloModule m
%cmp (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  %lt = pred[] compare(%a, %b), direction=LT
  %eq = pred[] compare(%a, %b), direction=EQ
  %lt2 = pred[] compare(%c, %d), direction=LT
  %both = pred[] and(%eq, %lt2)
  ROOT %r = pred[] or(%lt, %both)
}
ENTRY %e (x: f32[2,0], y: s32[2,0]) -> (f32[2,0], s32[2,0]) {
  %x = f32[2,0]{1,0} parameter(0)
  %y = s32[2,0]{1,0} parameter(1)
  ROOT %s = (f32[2,0]{1,0}, s32[2,0]{1,0}) sort(%x, %y), dimensions={1}, to_apply=%cmp
}""")
    a, b = hlo.evaluate(m, np.zeros((2, 0), np.float32), np.zeros((2, 0), np.int32))
    assert a.shape == (2, 0) and b.shape == (2, 0)
