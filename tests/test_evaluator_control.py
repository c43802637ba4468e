"""Evaluator rules for call, fusion, while, conditional, map and custom-call, in HLO text.

Expected values are worked out by hand or with plain Python (loops, sorted()).
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from hlo.evaluator import Evaluator, control

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

ADD_ONE = """%add_one (a: f32[3]) -> f32[3] {
  %a = f32[3]{0} parameter(0)
  %one = f32[] constant(1)
  %ones = f32[3]{0} broadcast(%one), dimensions={}
  ROOT %s = f32[3]{0} add(%a, %ones)
}
"""


def module(*parts: str) -> hlo.HloModule:
    return hlo.parse_module("HloModule t\n\n" + "\n".join(parts))


def test_call_and_fusion() -> None:
    m = module(ADD_ONE, """ENTRY %e (x: f32[3]) -> (f32[3], f32[3]) {
  %x = f32[3]{0} parameter(0)
  %c = f32[3]{0} call(%x), to_apply=%add_one
  %f = f32[3]{0} fusion(%c), kind=kLoop, calls=%add_one
  ROOT %t = (f32[3], f32[3]) tuple(%c, %f)
}""")
    c, f = hlo.evaluate(m, np.array([0, 1.5, -2], np.float32))
    np.testing.assert_array_equal(c, [1, 2.5, -1])
    np.testing.assert_array_equal(f, [2, 3.5, 0])


LOOP = """%cond (s: (s32[], f32[])) -> pred[] {
  %s = (s32[], f32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[])) -> (s32[], f32[]) {
  %s = (s32[], f32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %acc = f32[] get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %fi = f32[] convert(%i)
  %sum = f32[] add(%acc, %fi)
  ROOT %t = (s32[], f32[]) tuple(%next, %sum)
}

ENTRY %e (i0: s32[], a0: f32[]) -> (s32[], f32[]) {
  %i0 = s32[] parameter(0)
  %a0 = f32[] parameter(1)
  %init = (s32[], f32[]) tuple(%i0, %a0)
  ROOT %w = (s32[], f32[]) while(%init), condition=%cond, body=%body
}
"""


@pytest.mark.parametrize("start, acc, want_i, want_acc", [
    (0, 0.0, 10, sum(range(10))),
    (7, 0.5, 10, 0.5 + 7 + 8 + 9),
    (12, 3.0, 12, 3.0),  # condition false at once: the init comes back
])
def test_while(start: int, acc: float, want_i: int, want_acc: float) -> None:
    i, a = hlo.evaluate(hlo.parse_module("HloModule t\n\n" + LOOP), np.int32(start), np.float32(acc))
    assert i.dtype == np.int32 and int(i) == want_i
    assert a.dtype == np.float32 and float(a) == want_acc


def test_while_iteration_cap(monkeypatch) -> None:
    monkeypatch.setattr(control, "MAX_WHILE_ITERATIONS", 50)
    m = module("""%forever (s: s32[]) -> pred[] {
  %s = s32[] parameter(0)
  ROOT %t = pred[] constant(true)
}

%step (s: s32[]) -> s32[] {
  %s = s32[] parameter(0)
  %one = s32[] constant(1)
  ROOT %n = s32[] add(%s, %one)
}

ENTRY %e (x: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  ROOT %w = s32[] while(%x), condition=%forever, body=%step
}""")
    with pytest.raises(hlo.HloEvaluationError, match=r"%w: while loop still running after 50 iterations"):
        hlo.evaluate(m, np.int32(0))


BRANCHES = """%neg (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(%a)
}

%double (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %d = f32[2]{0} add(%a, %a)
}

%keep (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %c = f32[2]{0} copy(%a)
}
"""


@pytest.mark.parametrize("pred, want", [(True, [-1, 2]), (False, [2, -4])])
def test_conditional_pred(pred: bool, want) -> None:
    m = module(BRANCHES, """ENTRY %e (p: pred[], x: f32[2]) -> f32[2] {
  %p = pred[] parameter(0)
  %x = f32[2]{0} parameter(1)
  ROOT %c = f32[2]{0} conditional(%p, %x, %x), true_computation=%neg, false_computation=%double
}""")
    (out,) = hlo.evaluate(m, np.bool_(pred), np.array([1, -2], np.float32))
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("index, want", [
    (0, [-1, 2]), (1, [20, 40]), (2, [100, 200]),
    (3, [100, 200]), (-1, [100, 200]), (2**31 - 1, [100, 200]),  # out of range: the last branch
])
def test_conditional_index(index: int, want) -> None:
    m = module(BRANCHES, """ENTRY %e (i: s32[], a: f32[2], b: f32[2], c: f32[2]) -> f32[2] {
  %i = s32[] parameter(0)
  %a = f32[2]{0} parameter(1)
  %b = f32[2]{0} parameter(2)
  %c = f32[2]{0} parameter(3)
  ROOT %r = f32[2]{0} conditional(%i, %a, %b, %c), branch_computations={%neg, %double, %keep}
}""")
    args = [np.array([1, -2], np.float32), np.array([10, 20], np.float32), np.array([100, 200], np.float32)]
    (out,) = hlo.evaluate(m, np.int32(index), *args)
    np.testing.assert_array_equal(out, want)


SCALAR_ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""

# Not elementwise-safe: a conditional cannot run on a batch, so map falls back to one call per element.
ABS_BY_BRANCH = """%pos (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %c = f32[] copy(%a)
}

%negative (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %n = f32[] negate(%a)
}

%absb (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %z = f32[] constant(0)
  %p = pred[] compare(%a, %z), direction=GE
  ROOT %r = f32[] conditional(%p, %a, %a), true_computation=%pos, false_computation=%negative
}
"""


def test_map() -> None:
    m = module(SCALAR_ADD, ABS_BY_BRANCH, """ENTRY %e (x: f32[2,3], y: f32[2,3]) -> (f32[2,3], f32[2,3], f32[0]) {
  %x = f32[2,3]{1,0} parameter(0)
  %y = f32[2,3]{1,0} parameter(1)
  %s = f32[2,3]{1,0} map(%x, %y), dimensions={0,1}, to_apply=%add
  %a = f32[2,3]{1,0} map(%s), dimensions={0,1}, to_apply=%absb
  %z = f32[0]{0} constant({})
  %ez = f32[0]{0} map(%z), dimensions={0}, to_apply=%absb
  ROOT %t = (f32[2,3], f32[2,3], f32[0]) tuple(%s, %a, %ez)
}""")
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    y = np.array([[0.5, 0.5, -5], [1, 1, 1]], np.float32)
    s, a, ez = hlo.evaluate(m, x, y)
    np.testing.assert_array_equal(s, [[1.5, -1.5, -2], [-3, 6, -5]])
    np.testing.assert_array_equal(a, [[1.5, 1.5, 2], [3, 6, 5]])
    assert ez.shape == (0,)


def test_batched_call_through_nested_call_and_fusion() -> None:
    m = module(ADD_ONE, """%twice (a: f32[3]) -> f32[3] {
  %a = f32[3]{0} parameter(0)
  %c = f32[3]{0} call(%a), to_apply=%add_one
  ROOT %f = f32[3]{0} fusion(%c), kind=kLoop, calls=%add_one
}

ENTRY %e (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  ROOT %r = f32[3]{0} call(%x), to_apply=%twice
}""")
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = Evaluator(m).call("twice", [xs], batch=(4,))
    np.testing.assert_array_equal(out, xs + 2)


def test_conditional_refuses_a_batch() -> None:
    m = module(ABS_BY_BRANCH, "ENTRY %e (x: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
               "  ROOT %r = f32[] call(%x), to_apply=%absb\n}")
    with pytest.raises(hlo.HloEvaluationError, match="cannot run elementwise on a batch"):
        Evaluator(m).call("absb", [np.array([1, -2], np.float32)], batch=(2,))


# --- custom-call -------------------------------------------------------------


def test_unknown_custom_call_target_is_named() -> None:
    m = module("""ENTRY %e (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  ROOT %c = f32[3]{0} custom-call(%x), custom_call_target="my_secret_kernel"
}""")
    with pytest.raises(hlo.HloEvaluationError, match=r"%c: .*custom-call target 'my_secret_kernel'"):
        hlo.evaluate(m, np.zeros(3, np.float32))


def test_register_custom_call(monkeypatch) -> None:
    monkeypatch.setattr(control, "CUSTOM_CALLS", dict(control.CUSTOM_CALLS))

    @control.register_custom_call("test_scale")
    def scale(ev, inst, vals):
        return vals[0] * np.float32(3)

    with pytest.raises(ValueError, match="already registered"):
        control.register_custom_call("test_scale", scale)
    m = module("""ENTRY %e (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  ROOT %c = f32[3]{0} custom-call(%x), custom_call_target="test_scale"
}""")
    (out,) = hlo.evaluate(m, np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(out, [3, 6, 9])


# The comparator TF's XLA emits for tf.math.top_k: a total order on f32 through its bits.
TOPK_COMPARATOR = """%compare-greater-than (p.0.lhs: f32[], p.0.rhs: f32[], p.1.lhs: s32[], p.1.rhs: s32[]) -> pred[] {
  %p.0.lhs = f32[] parameter(0)
  %p.0.rhs = f32[] parameter(1)
  %p.1.lhs = s32[] parameter(2)
  %p.1.rhs = s32[] parameter(3)
  %zero = s32[] constant(0)
  %max = s32[] constant(2147483647)
  %bl = s32[] bitcast(%p.0.lhs)
  %br = s32[] bitcast(%p.0.rhs)
  %xl = s32[] xor(%max, %bl)
  %nl = pred[] compare(%bl, %zero), direction=LT
  %xr = s32[] xor(%max, %br)
  %nr = pred[] compare(%br, %zero), direction=LT
  %kl = s32[] select(%nl, %xl, %bl)
  %kr = s32[] select(%nr, %xr, %br)
  ROOT %gt = pred[] compare(%kl, %kr), direction=GT
}
"""


def _topk_module(rows: int, n: int, k: int, comparator: str = TOPK_COMPARATOR,
                 name: str = "compare-greater-than") -> hlo.HloModule:
    return module(comparator, f"""ENTRY %e (x: f32[{rows},{n}]) -> (f32[{rows},{k}], s32[{rows},{k}]) {{
  %x = f32[{rows},{n}]{{1,0}} parameter(0)
  ROOT %t = (f32[{rows},{k}]{{1,0}}, s32[{rows},{k}]{{1,0}}) custom-call(%x), custom_call_target="TopK", called_computations={{%{name}}}
}}""")


def _expected_topk(x: np.ndarray, k: int, key) -> tuple[np.ndarray, np.ndarray]:
    idx = np.array([sorted(range(len(row)), key=lambda i: (key(row[i]), i))[:k] for row in x], np.int32)
    return np.take_along_axis(x, idx, axis=1), idx


def test_topk_custom_call_with_tf_comparator() -> None:
    x = np.array([[3, 1, 3, -0.0, 0.0, 7, 1, -5],
                  [np.nan, 2, -np.inf, np.inf, 2, 2, -1, 0],
                  [0, 0, 0, 0, 0, 0, 0, 0]], np.float32)
    values, indices = hlo.evaluate(_topk_module(3, 8, 4), x)

    def key(v):  # descending total order: NaN > inf > ... > +0 > -0 > ... > -inf
        if np.isnan(v):
            return (0, 0.0)
        return (1, -float(v), 0 if not np.signbit(v) else 1)

    want_v, want_i = _expected_topk(x, 4, key)
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(values, want_v)
    assert indices.dtype == np.int32


def test_topk_custom_call_with_two_parameter_comparator() -> None:
    simple = """%gt (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=GT
}
"""
    x = np.random.default_rng(0).permutation(20).astype(np.float32).reshape(2, 10)
    x[0, 3] = x[0, 7] = 50  # a tie: the lower index first
    values, indices = hlo.evaluate(_topk_module(2, 10, 3, simple, "gt"), x)
    want_v, want_i = _expected_topk(x, 3, lambda v: -v)
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(values, want_v)
