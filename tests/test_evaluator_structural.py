"""Evaluator rules for constants, iota and data movement, written as HLO text.

Expected values come from index formulas (``out[i, j] = x[j, i]``), from TF's XLA
(``xla.pad``), or from the rule's definition; never from the evaluator itself.
A batched call (``Evaluator.call(..., batch=)``) must equal one call per element.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hlo
from hlo.evaluator import Evaluator
from hlo.evaluator.structural import TOKEN

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def run(body: str, *args, params: str = "", result: str, verify: bool = True) -> list[np.ndarray]:
    """Evaluate ``ENTRY (params) -> result { body }``; ``body`` holds the parameter lines too."""
    text = f"HloModule t\n\nENTRY %e ({params}) -> {result} {{\n{body}\n}}\n"
    return hlo.evaluate(hlo.parse_module(text), *args, verify=verify)


def one(body: str, *args, params: str = "", result: str, verify: bool = True) -> np.ndarray:
    (out,) = run(body, *args, params=params, result=result, verify=verify)
    return out


X23 = np.arange(6, dtype=np.float32).reshape(2, 3)
X234 = np.arange(24, dtype=np.int32).reshape(2, 3, 4)


def by_index(shape, fn, dtype) -> np.ndarray:
    """An array whose element at each index is ``fn(*index)``."""
    out = np.zeros(shape, dtype)
    for idx in itertools.product(*(range(d) for d in shape)):
        out[idx] = fn(*idx)
    return out


# --- constants and iota -------------------------------------------------------


def test_constants() -> None:
    body = """  %a = f32[2,2]{1,0} constant({ {1, 2}, {3, -0} })
  %b = pred[] constant(true)
  %c = (s32[], f32[2]) constant((7, {1.5, -inf}))
  %d = s32[0]{0} constant({})
  ROOT %t = (f32[2,2], pred[], (s32[], f32[2]), s32[0]) tuple(%a, %b, %c, %d)"""
    a, b, c0, c1, d = run(body, result="(f32[2,2], pred[], (s32[], f32[2]), s32[0])")
    np.testing.assert_array_equal(a, [[1, 2], [3, 0]])
    assert np.signbit(a[1, 1])
    assert b.dtype == np.bool_ and b.shape == () and bool(b)
    assert c0.dtype == np.int32 and int(c0) == 7
    np.testing.assert_array_equal(c1, np.array([1.5, -np.inf], np.float32))
    assert d.shape == (0,) and d.dtype == np.int32


def test_elided_constant_names_instruction() -> None:
    with pytest.raises(hlo.HloEvaluationError, match=r"%big \(constant\): f32\[40,50\].*elided"):
        one("  ROOT %big = f32[40,50]{1,0} constant({...})", result="f32[40,50]")


@pytest.mark.parametrize("shape, dim, dtype", [
    ("s32[2,3]", 0, np.int32), ("s32[2,3]", 1, np.int32), ("f32[4]", 0, np.float32),
    ("bf16[3,2,2]", 2, None), ("u8[0,3]", 1, np.uint8), ("s64[2,5]", 1, np.int64),
])
def test_iota(shape: str, dim: int, dtype) -> None:
    out = one(f"  ROOT %i = {shape} iota(), iota_dimension={dim}", result=shape)
    dims = out.shape
    want = by_index(dims, lambda *idx: idx[dim], np.float64)
    np.testing.assert_array_equal(out.astype(np.float64), want)
    if dtype is not None:
        assert out.dtype == dtype


# --- shape changes ---------------------------------------------------------------


@pytest.mark.parametrize("x, out_shape, dims, formula", [
    (np.float32(5), "f32[2,3]", "{}", lambda x, i, j: x),
    (np.array([1, 2, 3], np.float32), "f32[2,3]", "{1}", lambda x, i, j: x[j]),
    (np.array([1, 2], np.float32), "f32[2,3]", "{0}", lambda x, i, j: x[i]),
    (X23, "f32[3,4,2]", "{2,0}", lambda x, i, j, k: x[k, i]),
    (X23, "f32[2,5,3]", "{0,2}", lambda x, i, j, k: x[i, k]),
    (np.zeros((0,), np.float32), "f32[0,3]", "{0}", None),
])
def test_broadcast(x, out_shape: str, dims: str, formula) -> None:
    xs = f"f32[{','.join(map(str, np.shape(x)))}]"
    out = one(f"  %x = {xs} parameter(0)\n  ROOT %b = {out_shape} broadcast(%x), dimensions={dims}",
              np.asarray(x), params=f"x: {xs}", result=out_shape)
    if formula is None:
        assert out.shape == (0, 3)
    else:
        np.testing.assert_array_equal(out, by_index(out.shape, lambda *i: formula(np.asarray(x), *i), np.float32))


@pytest.mark.parametrize("src, dst, x", [
    ("s32[2,3,4]", "s32[6,4]", X234), ("s32[2,3,4]", "s32[24]", X234), ("s32[2,3,4]", "s32[4,3,2]", X234),
    ("s32[]", "s32[1,1]", np.int32(9)), ("s32[0,4]", "s32[2,0]", np.zeros((0, 4), np.int32)),
])
def test_reshape_is_row_major(src: str, dst: str, x) -> None:
    out = one(f"  %x = {src} parameter(0)\n  ROOT %r = {dst} reshape(%x)", x, params=f"x: {src}", result=dst)
    flat = [int(v) for v in np.asarray(x).flat]  # row-major order, element by element
    assert [int(v) for v in out.flat] == flat
    assert out.shape == tuple(int(d) for d in dst[4:-1].split(",") if d)


@pytest.mark.parametrize("perm, formula", [
    ("{2,0,1}", lambda x, i, j, k: x[j, k, i]),
    ("{1,0,2}", lambda x, i, j, k: x[j, i, k]),
    ("{0,1,2}", lambda x, i, j, k: x[i, j, k]),
])
def test_transpose(perm: str, formula) -> None:
    dims = [int(d) for d in perm[1:-1].split(",")]
    out_dims = [X234.shape[d] for d in dims]
    shape = f"s32[{','.join(map(str, out_dims))}]"
    out = one(f"  %x = s32[2,3,4] parameter(0)\n  ROOT %t = {shape} transpose(%x), dimensions={perm}", X234,
              params="x: s32[2,3,4]", result=shape)
    np.testing.assert_array_equal(out, by_index(tuple(out_dims), lambda *i: formula(X234, *i), np.int32))


@pytest.mark.parametrize("spec, out_shape, want", [
    ("{[0:2], [1:3], [0:4:2]}", "s32[2,2,2]",
     lambda x: [[[x[i, j, k] for k in (0, 2)] for j in (1, 2)] for i in (0, 1)]),
    ("{[1:2], [0:3:2], [3:4]}", "s32[1,2,1]", lambda x: [[[x[1, 0, 3]], [x[1, 2, 3]]]]),
    ("{[0:2], [2:2], [0:4]}", "s32[2,0,4]", lambda x: np.zeros((2, 0, 4), np.int32)),
    ("{[0:2], [0:3:5], [1:4:3]}", "s32[2,1,1]", lambda x: [[[x[0, 0, 1]]], [[x[1, 0, 1]]]]),
])
def test_slice(spec: str, out_shape: str, want) -> None:
    out = one(f"  %x = s32[2,3,4] parameter(0)\n  ROOT %s = {out_shape} slice(%x), slice={spec}", X234,
              params="x: s32[2,3,4]", result=out_shape)
    np.testing.assert_array_equal(out, np.array(want(X234), np.int32).reshape(out.shape))


def test_concatenate_with_empty_operand() -> None:
    a, b, c = np.array([[1, 2]], np.int32), np.zeros((1, 0), np.int32), np.array([[3]], np.int32)
    body = """  %a = s32[1,2] parameter(0)
  %b = s32[1,0] parameter(1)
  %c = s32[1,1] parameter(2)
  ROOT %r = s32[1,3] concatenate(%a, %b, %c), dimensions={1}"""
    out = one(body, a, b, c, params="a: s32[1,2], b: s32[1,0], c: s32[1,1]", result="s32[1,3]")
    np.testing.assert_array_equal(out, [[1, 2, 3]])


def test_concatenate_dim0() -> None:
    body = """  %a = f32[2,3] parameter(0)
  %b = f32[1,3] parameter(1)
  ROOT %r = f32[3,3] concatenate(%a, %b), dimensions={0}"""
    out = one(body, X23, np.full((1, 3), 9, np.float32), params="a: f32[2,3], b: f32[1,3]", result="f32[3,3]")
    np.testing.assert_array_equal(out, [[0, 1, 2], [3, 4, 5], [9, 9, 9]])


@pytest.mark.parametrize("padding, value, want", [
    ("1_2_1", 0, [0, 1, 0, 2, 0, 3, 0, 0]),  # interior, then low and high
    ("-1_-1_1", 0, [0, 2, 0]),  # [1,0,2,0,3] without its first and last element
    ("0_0_0", 0, [1, 2, 3]),
    ("-3_1", 7, [7]),  # everything cropped, then one pad value
    ("2_-1", 7, [7, 7, 1, 2]),
    ("0_0_2", 0, [1, 0, 0, 2, 0, 0, 3]),
])
def test_pad_1d(padding: str, value: int, want) -> None:
    body = f"""  %x = s32[3] parameter(0)
  %v = s32[] constant({value})
  ROOT %p = s32[{len(want)}] pad(%x, %v), padding={padding}"""
    out = one(body, np.array([1, 2, 3], np.int32), params="x: s32[3]", result=f"s32[{len(want)}]")
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("low, high, interior", [
    ([-1, 1], [2, -2], [1, 0]), ([0, 0], [0, 0], [2, 3]), ([-2, -1], [-1, 0], [1, 1]), ([3, 0], [0, -3], [0, 0]),
])
def test_pad_matches_tf_xla(low, high, interior) -> None:
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.python import xla

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = tf.function(lambda v: xla.pad(v, np.float32(-1), low, high, interior), jit_compile=True)(x).numpy()
    spec = "x".join(f"{lo}_{hi}_{it}" for lo, hi, it in zip(low, high, interior))
    shape = f"f32[{','.join(map(str, want.shape))}]"
    body = f"""  %x = f32[3,4] parameter(0)
  %v = f32[] constant(-1)
  ROOT %p = {shape} pad(%x, %v), padding={spec}"""
    np.testing.assert_array_equal(one(body, x, params="x: f32[3,4]", result=shape), want)


def test_pad_empty_operand() -> None:
    body = """  %x = f32[0,2] parameter(0)
  %v = f32[] constant(5)
  ROOT %p = f32[3,2] pad(%x, %v), padding=1_2_3x0_0"""
    out = one(body, np.zeros((0, 2), np.float32), params="x: f32[0,2]", result="f32[3,2]")
    np.testing.assert_array_equal(out, np.full((3, 2), 5, np.float32))


@pytest.mark.parametrize("dims, formula", [
    ("{0,2}", lambda x, i, j, k: x[1 - i, j, 3 - k]), ("{1}", lambda x, i, j, k: x[i, 2 - j, k]),
    ("{}", lambda x, i, j, k: x[i, j, k]),
])
def test_reverse(dims: str, formula) -> None:
    out = one(f"  %x = s32[2,3,4] parameter(0)\n  ROOT %r = s32[2,3,4] reverse(%x), dimensions={dims}", X234,
              params="x: s32[2,3,4]", result="s32[2,3,4]")
    np.testing.assert_array_equal(out, by_index((2, 3, 4), lambda *i: formula(X234, *i), np.int32))


# --- bitcast ------------------------------------------------------------------


@pytest.mark.parametrize("src, dst, want", [
    ("f32[2,3]{1,0}", "f32[3,2]{1,0}", lambda x: x.reshape(3, 2)),  # default layouts: a reshape
    ("f32[2,3]{1,0}", "f32[3,2]{0,1}", lambda x: x.T),  # same buffer, column-major result
    ("f32[2,3]{0,1}", "f32[2,3]{1,0}", lambda x: x.T.reshape(2, 3)),  # column-major operand read row-major
    ("f32[2,3]{1,0}", "f32[6]{0}", lambda x: x.reshape(6)),
    ("f32[2,3]", "f32[1,3,2]{1,2,0}", lambda x: x.reshape(1, 2, 3).transpose(0, 2, 1)),
    ("f32[2,3]{1,0}", "s32[2,3]{1,0}", lambda x: x.view(np.int32)),
    ("f32[2,3]{1,0}", "s32[3,2]{0,1}", lambda x: x.view(np.int32).T),
    ("f32[2,3]{1,0}", "f16[2,3,2]{2,1,0}", lambda x: x.view(np.float16).reshape(2, 3, 2)),
])
def test_bitcast_reinterprets_the_buffer(src: str, dst: str, want) -> None:
    body = f"  %x = {src} parameter(0)\n  ROOT %b = {dst} bitcast(%x)"
    out = one(body, X23, params=f"x: {src.split('{')[0]}", result=dst.split("{")[0], verify=False)
    expected = np.asarray(want(X23))
    assert out.dtype == expected.dtype and out.shape == expected.shape
    assert out.tobytes() == expected.tobytes()  # bitwise, in row-major order


def test_bitcast_errors() -> None:
    with pytest.raises(hlo.HloEvaluationError, match="element count"):
        one("  %x = f32[2,3] parameter(0)\n  ROOT %b = f32[5] bitcast(%x)", X23, params="x: f32[2,3]",
            result="f32[5]", verify=False)
    with pytest.raises(hlo.HloEvaluationError, match="tiled"):
        one("  %x = f32[2,3]{1,0:T(2,128)} parameter(0)\n  ROOT %b = f32[6]{0} bitcast(%x)", X23,
            params="x: f32[2,3]", result="f32[6]", verify=False)


# --- tuples, tokens, ids -----------------------------------------------------


def test_tuple_get_tuple_element_and_barrier() -> None:
    body = """  %x = f32[2,3] parameter(0)
  %n = s32[] parameter(1)
  %in = (s32[], f32[2,3]) tuple(%n, %x)
  %t = (f32[2,3], (s32[], f32[2,3])) tuple(%x, %in)
  %b = (f32[2,3], (s32[], f32[2,3])) opt-barrier(%t)
  %inner = (s32[], f32[2,3]) get-tuple-element(%b), index=1
  %n2 = s32[] get-tuple-element(%inner), index=0
  %x2 = f32[2,3] get-tuple-element(%inner), index=1
  ROOT %r = (s32[], f32[2,3]) tuple(%n2, %x2)"""
    n, x = run(body, X23, np.int32(4), params="x: f32[2,3], n: s32[]", result="(s32[], f32[2,3])")
    assert n.dtype == np.int32 and int(n) == 4
    np.testing.assert_array_equal(x, X23)


def test_tuple_result_is_flattened() -> None:
    body = """  %x = f32[2,3] parameter(0)
  %e = () tuple()
  ROOT %t = (f32[2,3], (), f32[2,3]) tuple(%x, %e, %x)"""
    outs = run(body, X23, params="x: f32[2,3]", result="(f32[2,3], (), f32[2,3])")
    assert len(outs) == 2
    np.testing.assert_array_equal(outs[1], X23)


def test_after_all_ids_and_dimension_size() -> None:
    body = """  %x = f32[2,3] parameter(0)
  %tok = token[] after-all()
  %tok2 = token[] after-all(%tok, %tok)
  %pid = u32[] partition-id()
  %rid = u32[] replica-id()
  %d1 = s32[] get-dimension-size(%x), dimensions={1}
  ROOT %t = (token[], u32[], u32[], s32[]) tuple(%tok2, %pid, %rid, %d1)"""
    tok, pid, rid, d1 = run(body, X23, params="x: f32[2,3]", result="(token[], u32[], u32[], s32[])")
    assert tok is TOKEN and tok.shape == (0,) and tok.dtype == np.bool_
    assert pid.dtype == np.uint32 and int(pid) == 0 and int(rid) == 0
    assert d1.dtype == np.int32 and int(d1) == 3


def test_set_dimension_size_passes_data_through() -> None:
    body = """  %x = f32[2,3] parameter(0)
  %n = s32[] constant(2)
  ROOT %s = f32[2,<=3] set-dimension-size(%x, %n), dimensions={1}"""
    np.testing.assert_array_equal(one(body, X23, params="x: f32[2,3]", result="f32[2,<=3]"), X23)


# --- batched calls -----------------------------------------------------------

BATCHABLE = """HloModule b

%body (x: f32[2,3], s: f32[], k: pred[]) -> (f32[3,2], f32[6], f32[2,3], f32[4,5], f32[3,2], s32[], f32[2,3], f32[3,2], f32[2,3]) {
  %x = f32[2,3]{1,0} parameter(0)
  %s = f32[] parameter(1)
  %k = pred[] parameter(2)
  %t = f32[3,2]{1,0} transpose(%x), dimensions={1,0}
  %r = f32[6]{0} reshape(%x)
  %bs = f32[2,3]{1,0} broadcast(%s), dimensions={}
  %sel = f32[2,3]{1,0} select(%k, %x, %bs)
  %pad = f32[4,5]{1,0} pad(%x, %s), padding=1_1x-1_1_1
  %sl = f32[2,2]{1,0} slice(%x), slice={[0:2], [1:3]}
  %rv = f32[2,2]{1,0} reverse(%sl), dimensions={0}
  %bs2 = f32[2,1]{1,0} broadcast(%s), dimensions={}
  %cat = f32[2,3]{1,0} concatenate(%rv, %bs2), dimensions={1}
  %bc = f32[3,2]{0,1} bitcast(%x)
  %n = s32[] get-dimension-size(%x), dimensions={1}
  %io = f32[2,3]{1,0} iota(), iota_dimension=1
  %cl = f32[2,3]{1,0} clamp(%s, %x, %io)
  %ct = f32[3,2]{1,0} convert(%t)
  ROOT %out = (f32[3,2], f32[6], f32[2,3], f32[4,5], f32[3,2], s32[], f32[2,3], f32[3,2], f32[2,3]) tuple(%t, %r, %sel, %pad, %bc, %n, %cl, %ct, %cat)
}

ENTRY %e (x: f32[2,3], s: f32[], k: pred[]) -> (f32[3,2], f32[6], f32[2,3], f32[4,5], f32[3,2], s32[], f32[2,3], f32[3,2], f32[2,3]) {
  %x = f32[2,3]{1,0} parameter(0)
  %s = f32[] parameter(1)
  %k = pred[] parameter(2)
  ROOT %c = (f32[3,2], f32[6], f32[2,3], f32[4,5], f32[3,2], s32[], f32[2,3], f32[3,2], f32[2,3]) call(%x, %s, %k), to_apply=%body
}
"""


def test_batched_call_equals_per_element_calls() -> None:
    module = hlo.parse_module(BATCHABLE)
    rng = np.random.default_rng(0)
    batch = (4, 3)
    xs = rng.normal(size=batch + (2, 3)).astype(np.float32)
    ss = rng.normal(size=batch).astype(np.float32)
    ks = rng.random(batch) < 0.5
    ev = Evaluator(module)
    batched = ev.call("body", [xs, ss, ks], batch=batch)
    for idx in np.ndindex(*batch):
        single = Evaluator(module).call("body", [xs[idx], ss[idx], np.asarray(ks[idx])])
        for k, (b, s) in enumerate(zip(batched, single)):
            assert b.shape == batch + s.shape, (k, b.shape, s.shape)
            np.testing.assert_array_equal(b[idx], s, err_msg=f"tuple element {k} at {idx}")
    # The entry's call passes the batch through as well.
    outs = hlo.evaluate(module, xs[0, 0], ss[0, 0], np.asarray(ks[0, 0]))
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o, batched[k][0, 0])


def test_dynamic_reshape() -> None:
    body = """  %x = s32[2,3] parameter(0)
  %a = s32[] parameter(1)
  %b = s32[] parameter(2)
  ROOT %r = s32[<=3,<=4] dynamic-reshape(%x, %a, %b)"""
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = one(body, x, np.int32(3), np.int32(2), params="x: s32[2,3], a: s32[], b: s32[]", result="s32[<=3,<=4]")
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(out[:3, :2], [[0, 1], [2, 3], [4, 5]])
    with pytest.raises(hlo.HloEvaluationError, match="cannot reshape"):
        one(body, x, np.int32(2), np.int32(2), params="x: s32[2,3], a: s32[], b: s32[]", result="s32[<=3,<=4]")


def test_token_parameter_passes_through() -> None:
    body = """  %t = token[] parameter(0)
  %x = f32[2] parameter(1)
  %a = token[] after-all(%t, %t)
  ROOT %r = (f32[2], token[]) tuple(%x, %a)"""
    x, tok = run(body, TOKEN, np.array([1, 2], np.float32), params="t: token[], x: f32[2]",
                 result="(f32[2], token[])")
    np.testing.assert_array_equal(x, [1, 2])
    assert tok is TOKEN
