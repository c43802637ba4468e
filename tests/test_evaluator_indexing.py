"""gather, scatter, dynamic-slice and dynamic-update-slice in the evaluator, against real XLA
(single ops taken from XLA's own HLO) and NumPy. Only the last tests (combiners that are more
than one op) need the elementwise and structural rules."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
from tensorflow.compiler.tf2xla.python import xla  # noqa: E402
from tensorflow.compiler.xla import xla_data_pb2  # noqa: E402

import hlo  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402
from tests.xla_oracle import assert_close, evaluate_single, scalar_fn  # noqa: E402

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def i32(lo, hi, *shape):
    return RNG.integers(lo, hi, shape).astype(np.int32)


def gather_dims(offset, collapsed, index_map, ivd, operand_batching=(), indices_batching=()):
    d = xla_data_pb2.GatherDimensionNumbers()
    d.offset_dims.extend(offset)
    d.collapsed_slice_dims.extend(collapsed)
    d.start_index_map.extend(index_map)
    d.index_vector_dim = ivd
    d.operand_batching_dims.extend(operand_batching)
    d.start_indices_batching_dims.extend(indices_batching)
    return d


def scatter_dims(window, inserted, to_operand, ivd, input_batching=(), indices_batching=()):
    d = xla_data_pb2.ScatterDimensionNumbers()
    d.update_window_dims.extend(window)
    d.inserted_window_dims.extend(inserted)
    d.scatter_dims_to_operand_dims.extend(to_operand)
    d.index_vector_dim = ivd
    d.input_batching_dims.extend(input_batching)
    d.scatter_indices_batching_dims.extend(indices_batching)
    return d


def check(fn, args, opcode):
    got, want = evaluate_single(fn, list(args), opcode)
    assert_close(got, want, 0, 0)
    return got


# --- gather --------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_tf_gather_axis(axis):
    x = f32(4, 5, 3)
    check(lambda x, i: tf.gather(x, i, axis=axis), [x, i32(0, x.shape[axis], 2, 3)], Opcode.GATHER)


def test_tf_gather_nd():
    x = f32(4, 5, 3)
    check(lambda x, i: tf.gather_nd(x, i), [x, i32(0, 4, 6, 2)], Opcode.GATHER)
    check(lambda x, i: tf.gather_nd(x, i), [x, i32(0, 4, 2, 3, 1)], Opcode.GATHER)


def test_gather_clamps_start_indices_like_xla():
    x = f32(5, 6)
    dims = gather_dims([1, 2], [], [0, 1], 1)
    idx = np.array([[-3, 0], [4, 5], [100, -100], [2, 3]], np.int32)
    got = check(lambda x, i: xla.gather(x, i, dims, [2, 3]), [x, idx], Opcode.GATHER)
    np.testing.assert_array_equal(got[0][1], x[3:5, 3:6])


def test_gather_index_vector_dim_in_the_middle_and_offset_dims_first():
    x = f32(6, 4, 5)
    dims = gather_dims([0, 3], [1], [1, 2], 1)  # indices [3, 2, 2]: the vector is dim 1
    idx = i32(-1, 6, 3, 2, 2)
    check(lambda x, i: xla.gather(x, i, dims, [6, 1, 3]), [x, idx], Opcode.GATHER)


def test_gather_operand_and_start_indices_batching_dims():
    x = f32(3, 7, 2, 4)
    dims = gather_dims([2], [1], [1], 1, operand_batching=[0, 2], indices_batching=[2, 0])
    idx = i32(0, 7, 2, 1, 3)  # [batch for operand dim 2, vector, batch for operand dim 0]
    got = check(lambda x, i: xla.gather(x, i, dims, [1, 1, 1, 4]), [x, idx], Opcode.GATHER)
    assert got[0].shape == (2, 3, 4)
    np.testing.assert_array_equal(got[0][1, 2], x[2, idx[1, 0, 2], 1])


def test_gather_empty_indices():
    m = hlo.parse_module("""
HloModule m
ENTRY %main (x: f32[5,6], i: s32[0,1]) -> f32[0,6] {
  %x = f32[5,6] parameter(0)
  %i = s32[0,1] parameter(1)
  ROOT %g = f32[0,6] gather(f32[5,6] %x, s32[0,1] %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}
}
""")
    (got,) = hlo.evaluate(m, f32(5, 6), np.zeros((0, 1), np.int32))
    assert got.shape == (0, 6)


# --- scatter -------------------------------------------------------------------------------


def test_tensor_scatter_nd_update_and_add():
    x, u = f32(4, 5), f32(4)
    idx = np.array([[0, 1], [3, 4], [0, 1], [2, 2]], np.int32)  # a duplicate: sequential order decides
    check(lambda x, i, u: tf.tensor_scatter_nd_add(x, i, u), [x, idx, u], Opcode.SCATTER)
    got = check(lambda x, i, u: tf.tensor_scatter_nd_update(x, i, u), [x, idx, u], Opcode.SCATTER)
    assert got[0][0, 1] == u[2]  # the last update wins


def test_scatter_nd_rows():
    check(lambda i, u: tf.scatter_nd(i, u, [5, 3]), [i32(0, 5, 6, 1), f32(6, 3)], Opcode.SCATTER)


@pytest.mark.parametrize("op", [tf.math.unsorted_segment_sum, tf.math.unsorted_segment_max,
                                tf.math.unsorted_segment_prod])
def test_unsorted_segment_ops_skip_out_of_range_ids(op):
    ids = np.array([0, 3, -1, 1, 3, 7, 0], np.int32)
    check(lambda x, i: op(x, i, 4), [f32(7, 3), ids], Opcode.SCATTER)


def test_scatter_skips_windows_that_leave_the_operand():
    dims = scatter_dims([1], [0], [0, 1], 1)
    idx = np.array([[0, 4], [1, 3], [2, -1], [6, 0], [4, 0]], np.int32)
    got = check(lambda x, i, u: xla.scatter(x, i, u, scalar_fn(tf.math.add), dims),
                [f32(5, 6), idx, f32(5, 3) + 100], Opcode.SCATTER)
    assert (got[0] > 50).sum() == 6  # rows 1 and 4 only


def test_scatter_batching_dims():
    dims = scatter_dims([1], [1], [1], 1, input_batching=[0], indices_batching=[0])
    idx = i32(0, 5, 3, 1)
    check(lambda x, i, u: xla.scatter(x, i, u, scalar_fn(tf.math.maximum), dims),
          [f32(3, 5, 2), idx, f32(3, 2)], Opcode.SCATTER)


def scatter_module(combiner: str, n_updates: int) -> hlo.HloModule:
    return hlo.parse_module(f"""
HloModule m
{combiner}
ENTRY %main (x: f32[4], i: s32[{n_updates},1], u: f32[{n_updates}]) -> f32[4] {{
  %x = f32[4] parameter(0)
  %i = s32[{n_updates},1] parameter(1)
  %u = f32[{n_updates}] parameter(2)
  ROOT %s = f32[4] scatter(f32[4] %x, s32[{n_updates},1] %i, f32[{n_updates}] %u), update_window_dims={{}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%f
}}
""")


def test_scatter_in_order_rounds_with_duplicates():
    overwrite = """
%f (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %b = f32[] parameter(1)
}
"""
    keep = overwrite.replace("%a = f32[] parameter(0)\n  ROOT %b", "ROOT %a = f32[] parameter(0)\n  %b")
    idx = np.array([[2], [0], [2], [9], [2], [-1]], np.int32)
    u = np.arange(10, 16, dtype=np.float32)
    x = np.zeros(4, np.float32)
    (got,) = hlo.evaluate(scatter_module(overwrite, 6), x, idx, u)
    np.testing.assert_array_equal(got, [11, 0, 14, 0])
    (got,) = hlo.evaluate(scatter_module(keep, 6), x, idx, u)
    np.testing.assert_array_equal(got, x)


# --- dynamic-slice / dynamic-update-slice -----------------------------------------------------


@pytest.mark.parametrize("start", [[1, 2], [4, -1], [-5, 9]])
def test_dynamic_slice_clamps(start):
    check(lambda x, s: xla.dynamic_slice(x, s, [2, 3]), [f32(5, 6), np.array(start, np.int32)],
          Opcode.DYNAMIC_SLICE)


@pytest.mark.parametrize("start", [[1, 2], [4, 5], [-2, 1]])
def test_dynamic_update_slice_clamps(start):
    check(lambda x, u, s: xla.dynamic_update_slice(x, u, s), [f32(5, 6), f32(2, 3), np.array(start, np.int32)],
          Opcode.DYNAMIC_UPDATE_SLICE)


def test_dynamic_slice_s64_indices_and_empty_update():
    m = hlo.parse_module("""
HloModule m
ENTRY %main (x: s32[3,4], a: s64[], b: s64[]) -> s32[2,4] {
  %x = s32[3,4] parameter(0)
  %a = s64[] parameter(1)
  %b = s64[] parameter(2)
  ROOT %ds = s32[2,4] dynamic-slice(s32[3,4] %x, s64[] %a, s64[] %b), dynamic_slice_sizes={2,4}
}
""")
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (got,) = hlo.evaluate(m, x, np.int64(7), np.int64(-3))
    np.testing.assert_array_equal(got, x[1:3])
    m = hlo.parse_module("""
HloModule m
ENTRY %main (x: s32[3,4], u: s32[3,0], a: s32[], b: s32[]) -> s32[3,4] {
  %x = s32[3,4] parameter(0)
  %u = s32[3,0] parameter(1)
  %a = s32[] parameter(2)
  %b = s32[] parameter(3)
  ROOT %dus = s32[3,4] dynamic-update-slice(s32[3,4] %x, s32[3,0] %u, s32[] %a, s32[] %b)
}
""")
    (got,) = hlo.evaluate(m, x, np.zeros((3, 0), np.int32), np.int32(2), np.int32(9))
    np.testing.assert_array_equal(got, x)


# --- combiners beyond one op: need the elementwise / structural rules -----------------------


def test_scatter_generic_combiner_in_order():
    combiner = """
%f (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %two = f32[] constant(2)
  %m = f32[] multiply(f32[] %a, f32[] %two)
  ROOT %r = f32[] add(f32[] %m, f32[] %b)
}
"""
    idx = np.array([[1], [1], [3], [1]], np.int32)
    u = np.array([1, 2, 3, 4], np.float32)
    (got,) = hlo.evaluate(scatter_module(combiner, 4), np.ones(4, np.float32), idx, u)
    np.testing.assert_array_equal(got, [1, ((1 * 2 + 1) * 2 + 2) * 2 + 4, 1, 2 + 3])


def test_variadic_scatter():
    m = hlo.parse_module("""
HloModule m
%f (a: f32[], i: s32[], b: f32[], j: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %i = s32[] parameter(1)
  %b = f32[] parameter(2)
  %j = s32[] parameter(3)
  %gt = pred[] compare(f32[] %b, f32[] %a), direction=GT
  %v = f32[] select(pred[] %gt, f32[] %b, f32[] %a)
  %k = s32[] select(pred[] %gt, s32[] %j, s32[] %i)
  ROOT %t = (f32[], s32[]) tuple(f32[] %v, s32[] %k)
}
ENTRY %main (x: f32[3], xi: s32[3], idx: s32[4,1], u: f32[4], ui: s32[4]) -> (f32[3], s32[3]) {
  %x = f32[3] parameter(0)
  %xi = s32[3] parameter(1)
  %idx = s32[4,1] parameter(2)
  %u = f32[4] parameter(3)
  %ui = s32[4] parameter(4)
  ROOT %s = (f32[3], s32[3]) scatter(f32[3] %x, s32[3] %xi, s32[4,1] %idx, f32[4] %u, s32[4] %ui), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%f
}
""")
    idx = np.array([[0], [2], [0], [0]], np.int32)
    vals, ids = hlo.evaluate(m, np.zeros(3, np.float32), np.full(3, -1, np.int32), idx,
                             np.array([5, 1, 7, 6], np.float32), np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(vals, [7, 0, 1])
    np.testing.assert_array_equal(ids, [2, -1, 1])


# --- index_check= (TF's gather check, hlo/index_check.py) -------------------------------------

CHECKED = """HloModule checked
ENTRY %e (x: f32[3,4], i: s32[2]) -> f32[2,4] {
  %x = f32[3,4] parameter(0)
  %i = s32[2] parameter(1)
  ROOT %g = f32[2,4] gather(f32[3,4] %x, s32[2] %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, index_check=tf_gather
}
"""


def test_index_check_round_trips_and_is_typed():
    module = hlo.parse_module(CHECKED)
    assert module.entry.root.attr("index_check") is hlo.IndexCheck.TF_GATHER
    assert hlo.parse_module(module.to_text()) == module
    assert "index_check=tf_gather\n" in module.to_text()
    with pytest.raises(hlo.HloParseError, match="an index check"):
        hlo.parse_module(CHECKED.replace("index_check=tf_gather", "index_check=clamp"))


def test_index_check_structure_is_verified():
    nd_on_scalars = hlo.parse_module(CHECKED.replace("tf_gather", "tf_gather_nd"))
    with pytest.raises(hlo.HloVerifierError, match="index_check=tf_gather_nd needs the index vector in the "
                                                   "indices' last dim"):
        hlo.verify(nd_on_scalars)
    vector = CHECKED.replace("s32[2]", "s32[2,1]")
    with pytest.raises(hlo.HloVerifierError, match="index_check=tf_gather needs scalar indices"):
        hlo.verify(hlo.parse_module(vector))


def test_checked_gather_raises_where_xla_clamps():
    module = hlo.parse_module(CHECKED)
    x = f32(3, 4)
    np.testing.assert_array_equal(hlo.evaluate(module, x, np.array([2, 0], np.int32))[0], x[[2, 0]])
    with pytest.raises(hlo.HloInvalidArgumentError, match=r"^indices\[1\] = 3 is not in \[0, 3\)\n\t \[\[\{\{node g"):
        hlo.evaluate(module, x, np.array([0, 3], np.int32))
    clamped = hlo.parse_module(CHECKED.replace(", index_check=tf_gather", ""))
    np.testing.assert_array_equal(hlo.evaluate(clamped, x, np.array([0, 3], np.int32))[0], x[[0, 2]])


CHECKED_SCATTER = """HloModule checked_scatter
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %e (x: f32[4,3], i: s32[2,1], u: f32[2,3]) -> f32[4,3] {
  %x = f32[4,3] parameter(0)
  %i = s32[2,1] parameter(1)
  %u = f32[2,3] parameter(2)
  ROOT %r = f32[4,3] scatter(f32[4,3] %x, s32[2,1] %i, f32[2,3] %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add, index_check=tf_scatter_nd
}
"""


def test_scatter_index_check_round_trips_and_is_verified():
    module = hlo.parse_module(CHECKED_SCATTER)
    assert module.entry.root.attr("index_check") is hlo.IndexCheck.TF_SCATTER_ND
    assert hlo.parse_module(module.to_text()) == module
    assert "index_check=tf_scatter_nd\n" in module.to_text()
    with pytest.raises(hlo.HloVerifierError, match="index_check=tf_gather is a gather's check, not a scatter's"):
        hlo.verify(hlo.parse_module(CHECKED_SCATTER.replace("tf_scatter_nd", "tf_gather")))
    with pytest.raises(hlo.HloVerifierError, match="index_check=tf_scatter_nd is a scatter's check, not a gather's"):
        hlo.verify(hlo.parse_module(CHECKED.replace("tf_gather", "tf_scatter_nd")))
    # a window narrower than the operand's trailing dims: passing TF's check would not mean every write lands
    narrow = CHECKED_SCATTER.replace("f32[2,3] %u", "f32[2,2] %u").replace("u: f32[2,3]", "u: f32[2,2]").replace(
        "%u = f32[2,3]", "%u = f32[2,2]")
    with pytest.raises(hlo.HloVerifierError, match=r"needs update windows spanning operand dims 1\.\. whole"):
        hlo.verify(hlo.parse_module(narrow))


def test_checked_scatter_raises_where_xla_skips():
    module = hlo.parse_module(CHECKED_SCATTER)
    x, u = f32(4, 3), f32(2, 3)
    want = x.copy()
    want[[3, 0]] += u
    np.testing.assert_allclose(hlo.evaluate(module, x, np.array([[3], [0]], np.int32), u)[0], want, rtol=1e-6)
    with pytest.raises(hlo.HloInvalidArgumentError,
                       match=r"^indices\[1\] = \[-1\] does not index into shape \[4,3\]\n\t \[\[\{\{node r\}\}\]\]$"):
        hlo.evaluate(module, x, np.array([[4], [-1]], np.int32), u)  # the last bad row, as TF
    skipped = hlo.parse_module(CHECKED_SCATTER.replace(", index_check=tf_scatter_nd", ""))
    want = x.copy()
    want[0] += u[1]
    np.testing.assert_allclose(hlo.evaluate(skipped, x, np.array([[4], [0]], np.int32), u)[0], want, rtol=1e-6)
