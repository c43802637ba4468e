"""AlgebraicSimplifier: every rule on HLO text (structure after, and bit-exact numbers before/after with
NaN, infinities and -0.0 among the inputs), rules that must not fire, the fixed point, the corpus.
Random and exhaustive sweeps against the evaluator are in ``test_pass_algsimp_sweeps.py``."""

from __future__ import annotations

import itertools
import re
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import hlo
from hlo.literal import format_literal
from hlo.dtypes import PrimitiveType
from hlo.passes.algsimp import AlgebraicSimplifier, RewriteContext, RuleError, all_rules
from hlo.passes.editor import ComputationEditor
from hlo.text.attr_codecs import format_value

ADD_F32 = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""
MAX_F32 = ADD_F32.replace("%add ", "%max ").replace("add(", "maximum(")
ADD_S32 = ADD_F32.replace("%add ", "%add_s32 ").replace("f32", "s32")


# --- helpers -----------------------------------------------------------------------------------


def module(body: str, params: str, callees: str = "") -> hlo.HloModule:
    """An ENTRY computation ``%e`` with ``params`` ("x: f32[2,3], y: s32[]") and ``body`` lines."""
    pairs = re.findall(r"(\w+):\s*(\w+\[[^\]]*\](?:\{[^}]*\})?)", params)
    lines = [f"  %{n} = {s} parameter({i})" for i, (n, s) in enumerate(pairs)]
    lines += ["  " + line.strip() for line in body.strip().splitlines()]
    signature = re.sub(r"\{[^}]*\}", "", f"({params}) -> {_root_shape(lines)}")
    text = f"HloModule m\n{callees}\nENTRY %e {signature} {{\n" + "\n".join(lines) + "\n}\n"
    m = hlo.parse_module(text)
    hlo.verify(m)
    return m


def _root_shape(lines: list[str]) -> str:
    root = next(line for line in lines if line.strip().startswith("ROOT"))
    return re.match(r".*?=\s*(.*?)\s+[a-z-]+\(", root).group(1)


def expr(comp: hlo.HloComputation, name: str | None = None) -> str:
    """The expression tree of ``name`` (default: the ROOT): parameters by name, constants by value,
    other instructions as ``opcode(operands){attributes but metadata}``."""
    inst = comp[name or comp.root_name]
    if inst.opcode is hlo.Opcode.PARAMETER:
        return inst.name
    if inst.opcode is hlo.Opcode.CONSTANT:
        return f"c({format_literal(inst.literal)})"
    args = ", ".join(expr(comp, o) for o in inst.operands)
    attrs = ", ".join(f"{k}={format_value(v)}" for k, v in inst.attrs.items() if k != "metadata")
    return f"{inst.opcode.text}({args})" + (f"{{{attrs}}}" if attrs else "")


FLOAT_SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e-40, -1e-40, 6e4, -2.5]


def sample(shape: hlo.Shape, rng: np.random.Generator) -> np.ndarray:
    """Inputs for ``shape``: floats mix NaN, +-inf, +-0, subnormals and random values; integers span their range."""
    dtype, dims = shape.dtype, shape.dims
    n = int(np.prod(dims, dtype=np.int64))
    if dtype.is_pred:
        return rng.integers(0, 2, dims).astype(bool)
    if dtype.is_integral:
        info = ml_dtypes.iinfo(dtype.numpy)
        wide = np.int64 if info.min < 0 else np.uint64
        vals = rng.integers(int(info.min), int(info.max), n, endpoint=True, dtype=wide)
        edge = np.array([info.min, info.max, 0, 1][:n], dtype=vals.dtype)
        vals[:len(edge)] = edge
        return vals.astype(dtype.numpy).reshape(dims)
    with np.errstate(all="ignore"):
        vals = rng.standard_normal(n) * 4
        specials = rng.permutation(np.array(FLOAT_SPECIALS))[:n]
        vals[:len(specials)] = specials
        return vals.astype(dtype.numpy).reshape(dims)


def small_integers(shape: hlo.Shape, rng: np.random.Generator) -> np.ndarray:
    """Float inputs whose sums are exact in any order, with +-0 and specials still present."""
    vals = rng.integers(-8, 8, shape.dims).astype(shape.dtype.numpy)
    flat = vals.reshape(-1)
    flat[:4] = np.array([-0.0, 0.0, np.inf, np.nan])[:flat.size]
    return vals


def assert_same_bits(got, want, what: str = "") -> None:
    """Bit-exact equality; NaNs equal each other whatever their payload or sign."""
    if isinstance(want, tuple):
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_bits(g, w, f"{what}[{i}]")
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind == "f" or "float" in got.dtype.name:
        with np.errstate(all="ignore"):
            g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        same = (g == w) & (np.signbit(g) == np.signbit(w))
        bad = ~(both_nan | same)
        assert not bad.any(), f"{what}: {got[bad][:5]} != {want[bad][:5]}"
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def assert_same_numbers(before: hlo.HloModule, after: hlo.HloModule, seeds=(0, 1, 2), make=sample) -> None:
    for seed in seeds:
        rng = np.random.default_rng(seed)
        args = [make(p.shape, rng) for p in before.entry.parameters]
        with np.errstate(all="ignore"):  # inf * 0 in the evaluator's matmul
            assert_same_bits(hlo.evaluate(after, *args), hlo.evaluate(before, *args), f"seed {seed}")


def simplify(m: hlo.HloModule, **options) -> tuple[hlo.HloModule, AlgebraicSimplifier]:
    p = AlgebraicSimplifier(**options)
    out = p.run(m)
    hlo.verify(out)
    return out, p


# --- one case per rule: (rule, params, body, callees, expected root expression[, input maker]) ----------

CASES = [
    ("add_zero", "x: f32[2,3]", """
        %z = f32[] constant(-0)
        %b = f32[2,3] broadcast(%z), dimensions={}
        ROOT %r = f32[2,3] add(%b, %x)""", "", "x"),
    ("add_zero", "x: s32[4]", """
        %z = s32[4] constant({0, 0, 0, 0})
        ROOT %r = s32[4] add(%x, %z)""", "", "x"),
    ("subtract_zero", "x: f32[5]", """
        %z = f32[] constant(0)
        %b = f32[5] broadcast(%z), dimensions={}
        ROOT %r = f32[5] subtract(%x, %b)""", "", "x"),
    ("multiply_one", "x: bf16[2,2]", """
        %o = bf16[] constant(1)
        %b = bf16[2,2] broadcast(%o), dimensions={}
        ROOT %r = bf16[2,2] multiply(%b, %x)""", "", "x"),
    ("multiply_zero_int", "x: s32[3]", """
        %z = s32[] constant(0)
        %b = s32[3] broadcast(%z), dimensions={}
        ROOT %r = s32[3] multiply(%x, %b)""", "", "broadcast(c(0)){dimensions={}}"),
    ("divide_one", "x: f16[6]", """
        %o = f16[] constant(1)
        %b = f16[6] broadcast(%o), dimensions={}
        ROOT %r = f16[6] divide(%x, %b)""", "", "x"),
    ("negate_negate", "x: s8[7]", """
        %n = s8[7] negate(%x)
        ROOT %r = s8[7] negate(%n)""", "", "x"),
    ("maximum_lowest", "x: f32[6]", """
        %m = f32[] constant(-inf)
        %b = f32[6] broadcast(%m), dimensions={}
        ROOT %r = f32[6] maximum(%b, %x)""", "", "x"),
    ("maximum_lowest", "x: s16[6]", """
        %m = s16[] constant(-32768)
        %b = s16[6] broadcast(%m), dimensions={}
        ROOT %r = s16[6] maximum(%x, %b)""", "", "x"),
    ("maximum_same", "x: f32[8]", "ROOT %r = f32[8] maximum(%x, %x)", "", "x"),
    ("minimum_highest", "x: f64[6]", """
        %m = f64[] constant(inf)
        %b = f64[6] broadcast(%m), dimensions={}
        ROOT %r = f64[6] minimum(%x, %b)""", "", "x"),
    ("minimum_same", "x: u8[8]", "ROOT %r = u8[8] minimum(%x, %x)", "", "x"),
    ("not_not", "x: pred[5]", """
        %n = pred[5] not(%x)
        ROOT %r = pred[5] not(%n)""", "", "x"),
    ("and_true", "x: pred[5]", """
        %t = pred[] constant(true)
        %b = pred[5] broadcast(%t), dimensions={}
        ROOT %r = pred[5] and(%b, %x)""", "", "x"),
    ("and_true", "x: u16[5]", """
        %t = u16[] constant(65535)
        %b = u16[5] broadcast(%t), dimensions={}
        ROOT %r = u16[5] and(%x, %b)""", "", "x"),
    ("and_false", "x: pred[5]", """
        %f = pred[] constant(false)
        %b = pred[5] broadcast(%f), dimensions={}
        ROOT %r = pred[5] and(%x, %b)""", "", "broadcast(c(false)){dimensions={}}"),
    ("and_same", "x: s32[3]", "ROOT %r = s32[3] and(%x, %x)", "", "x"),
    ("or_false", "x: pred[5]", """
        %f = pred[] constant(false)
        %b = pred[5] broadcast(%f), dimensions={}
        ROOT %r = pred[5] or(%b, %x)""", "", "x"),
    ("or_true", "x: s8[4]", """
        %t = s8[] constant(-1)
        %b = s8[4] broadcast(%t), dimensions={}
        ROOT %r = s8[4] or(%x, %b)""", "", "broadcast(c(-1)){dimensions={}}"),
    ("or_same", "x: pred[3]", "ROOT %r = pred[3] or(%x, %x)", "", "x"),
    ("xor_false", "x: s32[4]", """
        %z = s32[] constant(0)
        %b = s32[4] broadcast(%z), dimensions={}
        ROOT %r = s32[4] xor(%b, %x)""", "", "x"),
    ("compare_same", "x: s32[4]", "ROOT %r = pred[4] compare(%x, %x), direction=LT",
     "", "broadcast(c(false)){dimensions={}}"),
    ("compare_same", "x: f32[4]", "ROOT %r = pred[4] compare(%x, %x), direction=GE, type=TOTALORDER",
     "", "broadcast(c(true)){dimensions={}}"),
    ("select_constant_pred", "x: f32[4], y: f32[4]", """
        %t = pred[] constant(true)
        %p = pred[4] broadcast(%t), dimensions={}
        ROOT %r = f32[4] select(%p, %x, %y)""", "", "x"),
    ("select_constant_pred", "x: f32[2], y: f32[2]", """
        %p = pred[2] constant({false, false})
        ROOT %r = f32[2] select(%p, %x, %y)""", "", "y"),
    ("select_same", "p: pred[4], x: f32[4]", "ROOT %r = f32[4] select(%p, %x, %x)", "", "x"),
    ("broadcast_identity", "x: f32[2,3]", "ROOT %r = f32[2,3] broadcast(%x), dimensions={0,1}", "", "x"),
    ("broadcast_broadcast", "x: f32[3]", """
        %b = f32[2,3] broadcast(%x), dimensions={1}
        ROOT %r = f32[3,4,2] broadcast(%b), dimensions={2,0}""", "", "broadcast(x){dimensions={0}}"),
    ("reshape_identity", "x: f32[2,3]", "ROOT %r = f32[2,3] reshape(%x)", "", "x"),
    ("reshape_reshape", "x: f32[2,3]", """
        %a = f32[6] reshape(%x)
        ROOT %r = f32[3,2] reshape(%a)""", "", "reshape(x)"),
    ("reshape_reshape", "x: f32[2,3]", """
        %a = f32[3,2] reshape(%x)
        ROOT %r = f32[2,3] reshape(%a)""", "", "x"),
    ("reshape_scalar_broadcast", "x: f32[]", """
        %b = f32[2,3] broadcast(%x), dimensions={}
        ROOT %r = f32[6] reshape(%b)""", "", "broadcast(x){dimensions={}}"),
    ("reshape_unit_broadcast", "x: f32[48]", """
        %a = f32[1,1,1,48] reshape(%x)
        %b = f32[4,1,3,1,5,1,1,48] broadcast(%a), dimensions={1,3,5,7}
        ROOT %r = f32[4,3,5,48] reshape(%b)""", "", "broadcast(x){dimensions={3}}"),
    ("reshape_unit_broadcast", "x: f32[3,1]", """
        %b = f32[2,3,1] broadcast(%x), dimensions={1,2}
        ROOT %r = f32[1,2,3] reshape(%b)""", "", "broadcast(reshape(x)){dimensions={2}}"),
    ("transpose_identity", "x: f32[2,3]", "ROOT %r = f32[2,3] transpose(%x), dimensions={0,1}", "", "x"),
    ("transpose_transpose", "x: f32[2,3,4]", """
        %t = f32[3,4,2] transpose(%x), dimensions={1,2,0}
        ROOT %r = f32[4,2,3] transpose(%t), dimensions={1,2,0}""", "", "transpose(x){dimensions={2,0,1}}"),
    ("transpose_transpose", "x: f32[2,3]", """
        %t = f32[3,2] transpose(%x), dimensions={1,0}
        ROOT %r = f32[2,3] transpose(%t), dimensions={1,0}""", "", "x"),
    ("transpose_is_reshape", "x: f32[1,3,1,4]", "ROOT %r = f32[3,1,4,1] transpose(%x), dimensions={1,0,3,2}",
     "", "reshape(x)"),
    ("copy_same_layout", "x: f32[2,3]{1,0}", "ROOT %r = f32[2,3]{1,0} copy(%x)", "", "x"),
    ("bitcast_identity", "x: s32[4,2]{1,0}", "ROOT %r = s32[4,2]{1,0} bitcast(%x)", "", "x"),
    ("slice_full", "x: f32[3,4]", "ROOT %r = f32[3,4] slice(%x), slice={[0:3], [0:4]}", "", "x"),
    ("slice_slice", "x: f32[20,6]", """
        %a = f32[8,6] slice(%x), slice={[2:18:2], [0:6]}
        ROOT %r = f32[3,2] slice(%a), slice={[1:8:3], [3:5]}""", "", "slice(x){slice={[4:17:6], [3:5:1]}}"),
    ("concatenate_single", "x: f32[3,4]", "ROOT %r = f32[3,4] concatenate(%x), dimensions={1}", "", "x"),
    ("concatenate_drop_empty", "x: f32[3,4], y: f32[3,0], z: f32[3,2]",
     "ROOT %r = f32[3,6] concatenate(%x, %y, %z), dimensions={1}", "",
     "concatenate(x, z){dimensions={1}}"),
    ("pad_nothing", "x: f32[3,4]", """
        %v = f32[] constant(7)
        ROOT %r = f32[3,4] pad(%x, %v), padding=0_0_0x0_0""", "", "x"),
    ("dynamic_slice_constant_starts", "x: f32[5,6]", """
        %i = s32[] constant(7)
        %j = s32[] constant(-3)
        ROOT %r = f32[2,4] dynamic-slice(%x, %i, %j), dynamic_slice_sizes={2,4}""", "",
     "slice(x){slice={[3:5], [0:4]}}"),
    ("reverse_trivial", "x: f32[1,4,1]", "ROOT %r = f32[1,4,1] reverse(%x), dimensions={0,2}", "", "x"),
    ("convert_same_type", "x: f32[4]", "ROOT %r = f32[4] convert(%x)", "", "x"),
    ("convert_convert", "x: s8[4]", """
        %a = s32[4] convert(%x)
        ROOT %r = s64[4] convert(%a)""", "", "convert(x)"),
    ("convert_convert", "x: f32[6]", """
        %a = f64[6] convert(%x)
        ROOT %r = f32[6] convert(%a)""", "", "x"),
    ("reduce_nothing", "x: f32[3,1]", """
        %z = f32[] constant(-0)
        ROOT %r = f32[3] reduce(%x, %z), dimensions={1}, to_apply=%add""", ADD_F32, "reshape(x)"),
    ("reduce_nothing", "x: f32[3,1]", """
        %z = f32[] constant(0)
        ROOT %r = f32[3] reduce(%x, %z), dimensions={1}, to_apply=%add""", ADD_F32,
     "add(reshape(x), broadcast(c(0)){dimensions={}})"),
    ("reduce_nothing", "x: f32[4]", """
        %m = f32[] constant(-inf)
        ROOT %r = f32[4] reduce(%x, %m), dimensions={}, to_apply=%max""", MAX_F32, "x"),
    ("reduce_nothing", "x: f32[2,1,3]", """
        %m = f32[] constant(2.5)
        ROOT %r = f32[2,3] reduce(%x, %m), dimensions={1}, to_apply=%max""", MAX_F32,
     "maximum(reshape(x), broadcast(c(2.5)){dimensions={}})"),
    ("reduce_nothing", "x: s32[1,1]", """
        %z = s32[] constant(0)
        ROOT %r = s32[] reduce(%x, %z), dimensions={0,1}, to_apply=%add_s32""", ADD_S32, "reshape(x)"),
    ("reduce_of_unit_reshape", "x: f32[4,6]", """
        %z = f32[] constant(0)
        %a = f32[4,1,6,1] reshape(%x)
        ROOT %r = f32[1,1] reduce(%a, %z), dimensions={0,2}, to_apply=%add""", ADD_F32,
     "reshape(reduce(x, c(0)){dimensions={0,1}, to_apply=%add})", small_integers),
    ("reduce_of_unit_reshape", "x: s32[1,5,7]", """
        %z = s32[] constant(0)
        %a = s32[5,7] reshape(%x)
        ROOT %r = s32[5] reduce(%a, %z), dimensions={1}, to_apply=%add_s32""", ADD_S32,
     "reshape(reduce(x, c(0)){dimensions={2}, to_apply=%add_s32})"),
    ("dot_single_product", "x: f32[3,1], y: f32[1,4]",
     "ROOT %r = f32[3,4] dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "",
     "add(multiply(broadcast(reshape(x)){dimensions={0}}, broadcast(reshape(y)){dimensions={1}}), "
     "broadcast(c(0)){dimensions={}})"),
    ("dot_single_product", "x: bf16[2,1,3], y: bf16[4,2,1]",
     "ROOT %r = bf16[2,3,4] dot(%x, %y), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={1}, "
     "rhs_contracting_dims={2}", "",
     "convert(add(multiply(broadcast(reshape(convert(x))){dimensions={0,1}}, "
     "broadcast(reshape(transpose(convert(y)){dimensions={1,0,2}})){dimensions={0,2}}), "
     "broadcast(c(0)){dimensions={}}))"),
    ("dot_single_product", "x: s8[3], y: s8[5]", "ROOT %r = s32[3,5] dot(%x, %y)", "",
     "multiply(broadcast(convert(x)){dimensions={0}}, broadcast(convert(y)){dimensions={1}})"),
    ("convolution_of_zero_pad", "x: f32[1,6,6,3], w: f32[3,3,1,3]", """
        %z = f32[] constant(0)
        %p = f32[1,7,8,3] pad(%x, %z), padding=0_0x0_1x1_1x0_0
        ROOT %r = f32[1,3,3,3] convolution(%p, %w), window={size=3x3 stride=2x2 pad=1_0x0_0},
            dim_labels=b01f_01io->b01f, feature_group_count=3""", "",
     "convolution(x, w){window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
     "feature_group_count=3}"),
    ("dot_empty_sum", "x: f32[3,0], y: f32[0,4]",
     "ROOT %r = f32[3,4] dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "",
     "broadcast(c(0)){dimensions={}}"),
]


def _case_id(case) -> str:
    return f"{case[0]}-{case[1].split(':')[1].strip().split('[')[0]}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_rule(case) -> None:
    rule_name, params, body, callees, want = case[:5]
    make = case[5] if len(case) > 5 else sample
    before = module(body, params, callees)
    after, p = simplify(before)
    assert p.applied[rule_name] >= 1, f"{rule_name} did not fire: {dict(p.applied)}"
    assert expr(after.entry) == want
    assert after.entry.root.shape == before.entry.root.shape
    assert_same_numbers(before, after, make=make)
    assert AlgebraicSimplifier().run(after) is after  # idempotent: a second run changes nothing


def test_every_rule_has_a_case() -> None:
    tested = {c[0] for c in CASES}
    assert sorted(r.name for r in all_rules() if r.name not in tested) == []


# --- identities that do not hold must not be applied --------------------------------------------

KEPT = [
    ("x + 0.0 (-0.0 + 0.0 is +0.0)", "x: f32[4]", """
        %z = f32[] constant(0)
        %b = f32[4] broadcast(%z), dimensions={}
        ROOT %r = f32[4] add(%x, %b)""", ""),
    ("x - -0.0 (-0.0 - -0.0 is +0.0)", "x: f32[4]", """
        %z = f32[] constant(-0)
        %b = f32[4] broadcast(%z), dimensions={}
        ROOT %r = f32[4] subtract(%x, %b)""", ""),
    ("0 - x", "x: s32[4]", """
        %z = s32[] constant(0)
        %b = s32[4] broadcast(%z), dimensions={}
        ROOT %r = s32[4] subtract(%b, %x)""", ""),
    ("x * 0.0 (inf * 0 is NaN)", "x: f32[4]", """
        %z = f32[] constant(0)
        %b = f32[4] broadcast(%z), dimensions={}
        ROOT %r = f32[4] multiply(%x, %b)""", ""),
    ("1 / x", "x: f32[4]", """
        %o = f32[] constant(1)
        %b = f32[4] broadcast(%o), dimensions={}
        ROOT %r = f32[4] divide(%b, %x)""", ""),
    ("x == x for floats (NaN)", "x: f32[4]", "ROOT %r = pred[4] compare(%x, %x), direction=EQ", ""),
    ("max(x, -1e38)", "x: f32[4]", """
        %m = f32[] constant(-1e+38)
        %b = f32[4] broadcast(%m), dimensions={}
        ROOT %r = f32[4] maximum(%x, %b)""", ""),
    ("f32 -> f16 -> f32 rounds", "x: f32[4]", """
        %a = f16[4] convert(%x)
        ROOT %r = f32[4] convert(%a)""", ""),
    ("s16 -> f32 -> s8 saturates where s16 -> s8 wraps", "x: s16[4]", """
        %a = f32[4] convert(%x)
        ROOT %r = s8[4] convert(%a)""", ""),
    ("select on a non-constant predicate", "p: pred[4], x: f32[4], y: f32[4]",
     "ROOT %r = f32[4] select(%p, %x, %y)", ""),
    ("copy changing layout", "x: f32[2,3]{1,0}", "ROOT %r = f32[2,3]{0,1} copy(%x)", ""),
    ("transpose moving dims of size > 1", "x: f32[2,1,3]", "ROOT %r = f32[3,1,2] transpose(%x), dimensions={2,1,0}",
     ""),
    ("reduce with a two-op reducer", "x: f32[3,1]", """
        %z = f32[] constant(0)
        ROOT %r = f32[3] reduce(%x, %z), dimensions={1}, to_apply=%addsq""", """
%addsq (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %bb = f32[] multiply(%b, %b)
  ROOT %s = f32[] add(%a, %bb)
}
"""),
    ("reduce-max of size-1 dims with init 0 (which zero wins a tie is unspecified)", "x: f16[2,1]", """
        %z = f16[] constant(0)
        ROOT %r = f16[2] reduce(%x, %z), dimensions={1}, to_apply=%max""", MAX_F32.replace("f32", "f16")),
    ("dot with a contracting dim of size 2", "x: f32[3,2], y: f32[2,4]",
     "ROOT %r = f32[3,4] dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}", ""),
    ("convolution of a pad of -0 (-0 * w taps)", "x: f32[1,4,4,2], w: f32[3,3,2,2]", """
        %z = f32[] constant(-0)
        %p = f32[1,5,5,2] pad(%x, %z), padding=0_0x0_1x0_1x0_0
        ROOT %r = f32[1,2,2,2] convolution(%p, %w), window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f""", ""),
    ("convolution of a pad with interior padding", "x: f32[1,3,3,2], w: f32[3,3,2,2]", """
        %z = f32[] constant(0)
        %p = f32[1,5,5,2] pad(%x, %z), padding=0_0x0_0_1x0_0_1x0_0
        ROOT %r = f32[1,3,3,2] convolution(%p, %w), window={size=3x3}, dim_labels=b01f_01io->b01f""", ""),
    ("convolution of a pad of the feature dim", "x: f32[1,4,4,2], w: f32[3,3,3,2]", """
        %z = f32[] constant(0)
        %p = f32[1,4,4,3] pad(%x, %z), padding=0_0x0_0x0_0x0_1
        ROOT %r = f32[1,2,2,2] convolution(%p, %w), window={size=3x3}, dim_labels=b01f_01io->b01f""", ""),
    ("convolution of a pad of a base-dilated input", "x: f32[1,3,3,2], w: f32[3,3,2,2]", """
        %z = f32[] constant(0)
        %p = f32[1,4,4,2] pad(%x, %z), padding=0_0x0_1x0_1x0_0
        ROOT %r = f32[1,7,7,2] convolution(%p, %w), window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2},
            dim_labels=b01f_01io->b01f""", ""),
    ("convolution of a pad of 1", "x: f32[1,4,4,2], w: f32[3,3,2,2]", """
        %z = f32[] constant(1)
        %p = f32[1,5,5,2] pad(%x, %z), padding=0_0x0_1x0_1x0_0
        ROOT %r = f32[1,2,2,2] convolution(%p, %w), window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f""", ""),
    ("dynamic-slice with a parameter start", "x: f32[5], i: s32[]",
     "ROOT %r = f32[2] dynamic-slice(%x, %i), dynamic_slice_sizes={2}", ""),
    ("reshape(broadcast) merging two dims larger than 1", "x: f32[3]", """
        %b = f32[2,3] broadcast(%x), dimensions={1}
        ROOT %r = f32[6] reshape(%b)""", ""),
]


@pytest.mark.parametrize("case", KEPT, ids=[c[0] for c in KEPT])
def test_identities_that_do_not_hold_are_kept(case) -> None:
    _, params, body, callees = case
    m = module(body, params, callees)
    assert AlgebraicSimplifier().run(m) is m


def test_plus_zero_really_differs_for_negative_zero() -> None:
    """The reason ``x + 0.0`` is kept, checked on the evaluator itself."""
    m = module(KEPT[0][2], KEPT[0][1])
    x = np.array([-0.0, 1.0, np.nan, -np.inf], np.float32)
    (out,) = hlo.evaluate(m, x)
    assert not np.signbit(out[0])


# --- driver ------------------------------------------------------------------------------------


CHAIN = """
  %n1 = f32[2,3] negate(%x)
  %n2 = f32[2,3] negate(%n1)
  %r1 = f32[6] reshape(%n2)
  %r2 = f32[3,2] reshape(%r1)
  %t1 = f32[2,3] transpose(%r2), dimensions={1,0}
  %t2 = f32[3,2] transpose(%t1), dimensions={1,0}
  %z = f32[] constant(-0)
  %b = f32[3,2] broadcast(%z), dimensions={}
  %a = f32[3,2] add(%t2, %b)
  %o = f32[] constant(1)
  %bo = f32[3,2] broadcast(%o), dimensions={}
  ROOT %m = f32[3,2] multiply(%bo, %a)
"""


def test_chains_simplify_to_a_fixed_point() -> None:
    m = module(CHAIN, "x: f32[2,3]")
    out, p = simplify(m)
    assert expr(out.entry) == "reshape(x)"
    assert p.applied == Counter({"negate_negate": 1, "reshape_reshape": 1, "transpose_transpose": 1,
                                 "add_zero": 1, "multiply_one": 1})
    assert_same_numbers(m, out)
    assert AlgebraicSimplifier().run(out) is out


def test_round_cap_leaves_a_valid_module() -> None:
    # Round 1 composes the transposes into one that only moves a size-1 dim; round 2 makes it a reshape.
    m = module("""
        %t1 = f32[3,1,2] transpose(%x), dimensions={2,1,0}
        ROOT %t2 = f32[2,3,1] transpose(%t1), dimensions={2,0,1}""", "x: f32[2,1,3]")
    one, _ = simplify(m, max_rounds=1)
    assert expr(one.entry) == "transpose(x){dimensions={0,2,1}}"
    full, p = simplify(m)
    assert expr(full.entry) == "reshape(x)"
    assert p.applied == Counter({"transpose_transpose": 1, "transpose_is_reshape": 1})
    assert_same_numbers(m, one)
    assert_same_numbers(m, full)


def test_nothing_to_do_returns_the_same_module() -> None:
    m = module("""
        %e = f32[4] exponential(%x)
        ROOT %r = f32[4] add(%e, %x)""", "x: f32[4]")
    assert AlgebraicSimplifier().run(m) is m


def test_disabled_rules_do_not_fire() -> None:
    m = module("ROOT %r = f32[2,3] reshape(%x)", "x: f32[2,3]")
    assert AlgebraicSimplifier(disabled_rules=frozenset({"reshape_identity"})).run(m) is m


def test_unknown_rule_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown algsimp rule.*'no_such_rule'"):
        AlgebraicSimplifier(disabled_rules=frozenset({"no_such_rule"}))


def test_signature_and_root_name_are_kept() -> None:
    m = module("""
        %o = f32[] constant(1)
        %b = f32[2] broadcast(%o), dimensions={}
        %r0 = f32[2] multiply(%x, %b)
        %t = f32[2,1] reshape(%x)
        %u = f32[1,2] transpose(%t), dimensions={1,0}
        ROOT %r = (f32[2], f32[1,2]) tuple(%r0, %u)""", "x: f32[2]")
    out, _ = simplify(m)
    assert out.entry.root_name == "r"
    assert expr(out.entry) == "tuple(x, reshape(x))"
    assert out.entry.program_shape == m.entry.program_shape


def test_fused_computations_are_left_alone() -> None:
    fused = """
%fused (p: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  ROOT %c = f32[4] copy(%p)
}
"""
    m = module("ROOT %r = f32[4] fusion(%x), kind=kLoop, calls=%fused", "x: f32[4]", fused)
    assert AlgebraicSimplifier().run(m) is m


def test_ill_formed_replacements_are_rule_errors() -> None:
    m = module("ROOT %r = f32[2,3] negate(%x)", "x: f32[2,3]")
    editor = ComputationEditor(m.entry)
    ctx = RewriteContext(m, editor, {})
    inst = editor["r"]
    ctx.begin(inst)
    wrong_shape = ctx.new(hlo.Opcode.RESHAPE, hlo.Shape(PrimitiveType.F32, (6,)), [editor["x"]])
    with pytest.raises(RuleError, match=r"rule bad on %r: replacement shape f32\[6\] differs from f32\[2,3\]"):
        ctx.check(inst, wrong_shape, "bad")
    ctx.begin(inst)
    wrong_dims = ctx.new(hlo.Opcode.BROADCAST, inst.shape, [editor["x"]], {"dimensions": (1, 0)})
    with pytest.raises(RuleError, match="rule bad on %r: new broadcast is ill-formed"):
        ctx.check(inst, wrong_dims, "bad")
    with pytest.raises(RuleError, match="replacement %nope does not exist"):
        ctx.check(inst, "nope", "bad")


def test_counts_accumulate_over_runs() -> None:
    p = AlgebraicSimplifier()
    m = module("ROOT %r = f32[2,3] reshape(%x)", "x: f32[2,3]")
    p.run(m)
    p.run(m)
    assert p.applied["reshape_identity"] == 2


# --- the corpus --------------------------------------------------------------------------------


@pytest.mark.slow
def test_corpus_evaluates_the_same_after_simplification() -> None:
    from tests.hlo_corpus.cases import CASES as CORPUS
    from tests.hlo_corpus.generate import STAGES, case_args, hlo_text

    p = AlgebraicSimplifier()
    changed = 0
    for case, stage in itertools.product(CORPUS, STAGES):
        m = hlo.parse_module(hlo_text(case, stage))
        out = p.run(m)
        hlo.verify(out)
        if out is m:
            continue
        changed += 1
        args = case_args(case)
        assert_same_bits(tuple(hlo.evaluate(out, *args)), tuple(hlo.evaluate(m, *args)), f"{case.name}/{stage}")
        assert p.run(out) is out, f"{case.name}/{stage}: a second run changed the module"
    assert changed >= len(CORPUS)  # the unoptimized HLO always has identity reshapes
