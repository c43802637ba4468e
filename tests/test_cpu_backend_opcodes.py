"""Exhaustiveness of the CPU backend: every HLO opcode compiles and matches the evaluator, or is refused.

``CASES`` holds, per opcode, tiny modules exercising it (several element types
in one module where cheap: f32, s32, pred, f16, bf16, u8, s64, f64); each must
compile and match ``hlo.evaluate``. ``REFUSED`` lists the opcodes the backend
deliberately does not generate, with a module using it and the reason its
``CodegenUnsupported`` must give. ``test_every_opcode_is_covered`` proves that
no opcode is silently untested. All modules compile once per session, two gcc
processes at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from backends.cpu import CodegenUnsupported
from hlo.opcodes import Opcode
from tests.cpu_backend_util import (  # noqa: F401  (kernel_cache is a fixture)
    check_module, compile_many, compile_text, kernel_cache, module, parse, random_args,
)

FLOATS = ("f32", "f64", "f16", "bf16")
NUMERIC = ("f32", "s32", "u8", "s64", "f64", "f16", "bf16")
INTS = ("s32", "u8", "s64", "u32", "s8")
SIGNED = ("f32", "s32", "s64", "f64", "f16", "bf16", "s8")
N = 7  # elements per operand: odd, not a multiple of a vector width


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    args: Callable[[np.random.Generator, list], list] | None = None  # (rng, default args) -> args


def elementwise(op: str, dtypes, arity: int = 1, out: Callable[[str], str] | None = None, attrs: str = "",
                dims: str = str(N), name: str | None = None) -> str:
    params, lines, results = [], [], []
    for k, t in enumerate(dtypes):
        args = [f"a{k}_{j}" for j in range(arity)]
        params += [f"{a}: {t}[{dims}]" for a in args]
        shape = f"{(out or (lambda t: t))(t)}[{dims}]"
        lines.append(f"  %r{k} = {shape} {op}({', '.join('%' + a for a in args)}){', ' + attrs if attrs else ''}")
        results.append((f"r{k}", shape))
    return module(name or op, params, lines, results)


def positive(rng, args):
    return [np.abs(a) + a.dtype.type(0.25) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a
            for a in args]


def shift_amounts(rng, args):  # every second operand becomes a shift amount in [0, 70): past every width
    return [rng.integers(0, 70, a.shape).astype(a.dtype) if k % 2 else a for k, a in enumerate(args)]


def small_exponents(rng, args):
    out = []
    for k, a in enumerate(args):
        if k % 2 and a.dtype.kind in "iu":
            a = rng.integers(-2 if a.dtype.kind == "i" else 0, 6, a.shape).astype(a.dtype)
        out.append(a)
    return out


def with_specials(rng, args):
    """Float inputs get NaN, +-inf, huge, -0 and halves (saturating converts, rounding, is-finite)."""
    specials = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, -0.0, 2.5, -2.5, 0.5, 1e-3], np.float64)
    out = []
    for a in args:
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            flat = a.reshape(-1).astype(np.float64)
            flat[: min(flat.size, specials.size)] = specials[: flat.size]
            with np.errstate(over="ignore"):  # 3e9 is inf in f16
                a = flat.astype(a.dtype).reshape(a.shape)
        out.append(a)
    return out


def _unary_cases() -> list[tuple[Opcode, Case]]:
    float_math = [
        (Opcode.EXPONENTIAL, None), (Opcode.EXPONENTIAL_MINUS_ONE, None), (Opcode.LOG, positive),
        (Opcode.LOG_PLUS_ONE, positive), (Opcode.SQRT, positive), (Opcode.RSQRT, positive), (Opcode.CBRT, None),
        (Opcode.TANH, None), (Opcode.LOGISTIC, None), (Opcode.SINE, None), (Opcode.COSINE, None),
        (Opcode.TAN, None), (Opcode.ERF, None), (Opcode.FLOOR, with_specials), (Opcode.CEIL, with_specials),
        (Opcode.ROUND_NEAREST_AFZ, with_specials), (Opcode.ROUND_NEAREST_EVEN, with_specials),
    ]
    cases = [(op, Case(op.text, elementwise(op.text, FLOATS), fn)) for op, fn in float_math]
    cases += [
        (Opcode.ABS, Case("abs", elementwise("abs", SIGNED))),
        (Opcode.NEGATE, Case("negate", elementwise("negate", NUMERIC + ("s8",)))),
        (Opcode.SIGN, Case("sign", elementwise("sign", SIGNED), with_specials)),
        (Opcode.NOT, Case("not", elementwise("not", ("pred", "s32", "u8", "s64")))),
        (Opcode.IS_FINITE, Case("is-finite", elementwise("is-finite", FLOATS, out=lambda t: "pred"), with_specials)),
        (Opcode.POPCNT, Case("popcnt", elementwise("popcnt", INTS + ("u16",)))),
        (Opcode.CLZ, Case("count-leading-zeros", elementwise("count-leading-zeros", INTS + ("u16",)))),
        (Opcode.COPY, Case("copy", elementwise("copy", NUMERIC + ("pred",)))),
    ]
    return cases


def _binary_cases() -> list[tuple[Opcode, Case]]:
    arith = NUMERIC + ("s8",)
    cases = [
        (Opcode.ADD, Case("add", elementwise("add", arith, 2))),
        (Opcode.SUBTRACT, Case("subtract", elementwise("subtract", arith, 2))),
        (Opcode.MULTIPLY, Case("multiply", elementwise("multiply", arith, 2))),
        # integer divisors include 0 (x/0 = -1, x%0 = x in XLA)
        (Opcode.DIVIDE, Case("divide", elementwise("divide", arith, 2))),
        (Opcode.REMAINDER, Case("remainder", elementwise("remainder", arith, 2))),
        (Opcode.POWER, Case("power", elementwise("power", ("f32", "f64", "f16", "s32", "u8", "s64"), 2),
                            small_exponents)),
        (Opcode.MAXIMUM, Case("maximum", elementwise("maximum", arith + ("pred",), 2), with_specials)),
        (Opcode.MINIMUM, Case("minimum", elementwise("minimum", arith + ("pred",), 2), with_specials)),
        (Opcode.ATAN2, Case("atan2", elementwise("atan2", FLOATS, 2))),
        (Opcode.AND, Case("and", elementwise("and", ("pred", "s32", "u8", "s64"), 2))),
        (Opcode.OR, Case("or", elementwise("or", ("pred", "s32", "u8", "s64"), 2))),
        (Opcode.XOR, Case("xor", elementwise("xor", ("pred", "s32", "u8", "s64"), 2))),
    ]
    for op in (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL, Opcode.SHIFT_RIGHT_ARITHMETIC):
        cases.append((op, Case(op.text, elementwise(op.text, INTS, 2), shift_amounts)))
    directions = ["EQ", "NE", "LT", "LE", "GT", "GE"]
    params, lines, results = [], [], []
    for k, t in enumerate(("f32", "s32", "u8", "f16", "bf16", "f64", "s64")):
        params += [f"x{k}: {t}[{N}]", f"y{k}: {t}[{N}]"]
        d = directions[k % len(directions)]
        lines.append(f"  %c{k} = pred[{N}] compare(%x{k}, %y{k}), direction={d}")
        results.append((f"c{k}", f"pred[{N}]"))
    params += ["px: pred[7]", "py: pred[7]"]
    lines += ["  %cp = pred[7] compare(%px, %py), direction=NE",
              "  %ct = pred[7] compare(%x0, %x0), direction=LT, type=TOTALORDER",
              "  %cx = pred[7] compare(%x0, %y0), direction=EQ"]
    results += [("cp", "pred[7]"), ("ct", "pred[7]"), ("cx", "pred[7]")]
    cases.append((Opcode.COMPARE, Case("compare", module("compare", params, lines, results), with_specials)))
    return cases


def _other_elementwise_cases() -> list[tuple[Opcode, Case]]:
    select = module("select", ["p: pred[7]", "s: pred[]", "a: f32[7]", "b: f32[7]", "c: s32[7]", "d: s32[7]",
                               "e: pred[7]", "f: pred[7]", "g: bf16[7]", "h: bf16[7]"],
                    ["  %r0 = f32[7] select(%p, %a, %b)", "  %r1 = s32[7] select(%p, %c, %d)",
                     "  %r2 = pred[7] select(%p, %e, %f)", "  %r3 = f32[7] select(%s, %a, %b)",
                     "  %r4 = bf16[7] select(%p, %g, %h)"],
                    [("r0", "f32[7]"), ("r1", "s32[7]"), ("r2", "pred[7]"), ("r3", "f32[7]"), ("r4", "bf16[7]")])
    clamp = module("clamp", ["lo: f32[]", "x: f32[7]", "hi: f32[]", "l2: s32[7]", "y: s32[7]", "h2: s32[7]",
                             "a: u8[]", "z: u8[7]", "b: u8[]", "lo16: f16[]", "x16: f16[7]", "hi16: f16[]"],
                   ["  %r0 = f32[7] clamp(%lo, %x, %hi)", "  %r1 = s32[7] clamp(%l2, %y, %h2)",
                    "  %r2 = u8[7] clamp(%a, %z, %b)", "  %r3 = f16[7] clamp(%lo16, %x16, %hi16)"],
                   [("r0", "f32[7]"), ("r1", "s32[7]"), ("r2", "u8[7]"), ("r3", "f16[7]")])
    pairs = [("f32", "s32"), ("s32", "f32"), ("f32", "f16"), ("f16", "bf16"), ("bf16", "f32"), ("f64", "u8"),
             ("pred", "f32"), ("s64", "s32"), ("u8", "s8"), ("f32", "pred"), ("f32", "u32"), ("f64", "s64"),
             ("s32", "bf16"), ("f32", "f64"), ("s8", "u8"), ("u8", "f16")]
    params = [f"x{k}: {src}[{N}]" for k, (src, _) in enumerate(pairs)]
    lines = [f"  %r{k} = {dst}[{N}] convert(%x{k})" for k, (_, dst) in enumerate(pairs)]
    convert = module("convert", params, lines, [(f"r{k}", f"{dst}[{N}]") for k, (_, dst) in enumerate(pairs)])
    bc_pairs = [("f32", "s32"), ("s32", "f32"), ("f16", "u16"), ("bf16", "s16"), ("f64", "s64"), ("u32", "f32"),
                ("u16", "bf16")]
    params = [f"x{k}: {src}[{N}]" for k, (src, _) in enumerate(bc_pairs)]
    lines = [f"  %r{k} = {dst}[{N}] bitcast-convert(%x{k})" for k, (_, dst) in enumerate(bc_pairs)]
    bitcast_convert = module("bitcast_convert", params, lines,
                             [(f"r{k}", f"{dst}[{N}]") for k, (_, dst) in enumerate(bc_pairs)])
    rp = [("f32", 5, 10), ("f32", 8, 7), ("f64", 8, 23), ("f32", 4, 2), ("bf16", 5, 2), ("f16", 5, 3)]
    params = [f"x{k}: {t}[{N}]" for k, (t, _, _) in enumerate(rp)]
    lines = [f"  %r{k} = {t}[{N}] reduce-precision(%x{k}), exponent_bits={e}, mantissa_bits={m}"
             for k, (t, e, m) in enumerate(rp)]
    reduce_precision = module("reduce_precision", params, lines,
                              [(f"r{k}", f"{t}[{N}]") for k, (t, _, _) in enumerate(rp)])

    def wide_floats(rng, args):  # overflow and underflow the reduced exponent ranges
        with np.errstate(over="ignore"):
            return [a * a.dtype.type(1e3) if a.dtype.kind == "f" else a for a in with_specials(rng, args)]

    return [
        (Opcode.SELECT, Case("select", select)),
        (Opcode.CLAMP, Case("clamp", clamp)),
        (Opcode.CONVERT, Case("convert", convert, with_specials)),
        (Opcode.BITCAST_CONVERT, Case("bitcast-convert", bitcast_convert)),
        (Opcode.REDUCE_PRECISION, Case("reduce-precision", reduce_precision, wide_floats)),
    ]


ADD_F32 = """
%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%add_s32 (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}
%max_f16 (a: f16[], b: f16[]) -> f16[] {
  %a = f16[] parameter(0)
  %b = f16[] parameter(1)
  ROOT %s = f16[] maximum(%a, %b)
}
%or_pred (a: pred[], b: pred[]) -> pred[] {
  %a = pred[] parameter(0)
  %b = pred[] parameter(1)
  ROOT %s = pred[] or(%a, %b)
}
%ge_f32 (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=GE
}
%lt_f32 (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=LT
}
%gt_f32 (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = pred[] compare(%a, %b), direction=GT
}
%argmax (a: f32[], ai: s32[], b: f32[], bi: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %ai = s32[] parameter(1)
  %b = f32[] parameter(2)
  %bi = s32[] parameter(3)
  %ge = pred[] compare(%a, %b), direction=GE
  %v = f32[] select(%ge, %a, %b)
  %i = s32[] select(%ge, %ai, %bi)
  ROOT %t = (f32[], s32[]) tuple(%v, %i)
}
"""


def _data_movement_cases() -> list[tuple[Opcode, Case]]:
    def one(name, params, lines, results, comps=ADD_F32):
        return module(name, params, lines, results, comps)

    def clamp_indices(rng, args):  # start indices in [-3, 9]: some clamp at either end
        return [rng.integers(-3, 10, a.shape).astype(a.dtype) if a.ndim == 0 and a.dtype.kind in "iu" else a
                for a in args]

    def oob_indices(rng, args):  # integer inputs (gather/scatter indices among them) partly out of bounds
        return [rng.integers(-2, 8, a.shape).astype(a.dtype) if a.dtype.kind in "iu" else a for a in args]

    return [
        (Opcode.BROADCAST, Case("broadcast", one(
            "broadcast", ["x: f32[3]", "s: s32[]", "p: pred[2]", "h: bf16[3]"],
            ["  %r0 = f32[2,3,5] broadcast(%x), dimensions={1}", "  %r1 = s32[4,3] broadcast(%s), dimensions={}",
             "  %r2 = pred[2,3] broadcast(%p), dimensions={0}", "  %r3 = bf16[3,2] broadcast(%h), dimensions={0}"],
            [("r0", "f32[2,3,5]"), ("r1", "s32[4,3]"), ("r2", "pred[2,3]"), ("r3", "bf16[3,2]")]))),
        (Opcode.RESHAPE, Case("reshape", one(
            "reshape", ["x: f32[2,3,5]", "y: s64[6]", "z: u8[1]"],
            ["  %r0 = f32[5,6] reshape(%x)", "  %r1 = s64[3,1,2] reshape(%y)", "  %r2 = u8[] reshape(%z)"],
            [("r0", "f32[5,6]"), ("r1", "s64[3,1,2]"), ("r2", "u8[]")]))),
        (Opcode.BITCAST, Case("bitcast", one(
            "bitcast", ["x: f32[2,3]", "y: s32[4,2]"],
            ["  %r0 = f32[3,2]{0,1} bitcast(%x)", "  %r1 = s32[8] bitcast(%y)"],
            [("r0", "f32[3,2]{0,1}"), ("r1", "s32[8]")]))),
        (Opcode.TRANSPOSE, Case("transpose", one(
            "transpose", ["x: f32[2,3,5]", "y: f16[4,3]", "z: pred[3,2]"],
            ["  %r0 = f32[5,2,3] transpose(%x), dimensions={2,0,1}", "  %r1 = f16[3,4] transpose(%y), dimensions={1,0}",
             "  %r2 = pred[2,3] transpose(%z), dimensions={1,0}"],
            [("r0", "f32[5,2,3]"), ("r1", "f16[3,4]"), ("r2", "pred[2,3]")]))),
        (Opcode.SLICE, Case("slice", one(
            "slice", ["x: f32[7,9]", "y: s32[10]"],
            ["  %r0 = f32[3,3] slice(%x), slice={[1:7:2], [2:9:3]}", "  %r1 = s32[4] slice(%y), slice={[5:9]}"],
            [("r0", "f32[3,3]"), ("r1", "s32[4]")]))),
        (Opcode.DYNAMIC_SLICE, Case("dynamic-slice", one(
            "dynamic_slice", ["x: f32[7,5]", "i: s32[]", "j: s32[]", "y: u8[6]", "k: s64[]"],
            ["  %r0 = f32[3,2] dynamic-slice(%x, %i, %j), dynamic_slice_sizes={3,2}",
             "  %r1 = u8[4] dynamic-slice(%y, %k), dynamic_slice_sizes={4}"],
            [("r0", "f32[3,2]"), ("r1", "u8[4]")]), clamp_indices)),
        (Opcode.DYNAMIC_UPDATE_SLICE, Case("dynamic-update-slice", one(
            "dynamic_update_slice", ["x: f32[7,5]", "u: f32[3,2]", "i: s32[]", "j: s32[]", "y: bf16[6]", "v: bf16[2]",
                                     "k: s64[]"],
            ["  %r0 = f32[7,5] dynamic-update-slice(%x, %u, %i, %j)",
             "  %r1 = bf16[6] dynamic-update-slice(%y, %v, %k)"],
            [("r0", "f32[7,5]"), ("r1", "bf16[6]")]), clamp_indices)),
        (Opcode.CONCATENATE, Case("concatenate", one(
            "concatenate", ["a: f32[2,3]", "b: f32[2,1]", "c: f32[2,4]", "p: pred[3]", "q: pred[2]"],
            ["  %r0 = f32[2,8] concatenate(%a, %b, %c), dimensions={1}",
             "  %r1 = pred[5] concatenate(%p, %q), dimensions={0}"],
            [("r0", "f32[2,8]"), ("r1", "pred[5]")]))),
        (Opcode.PAD, Case("pad", one(
            "pad", ["x: f32[3,4]", "v: f32[]", "y: s32[5]", "w: s32[]"],
            ["  %r0 = f32[8,5] pad(%x, %v), padding=1_2_1x-1_2",
             "  %r1 = s32[3] pad(%y, %w), padding=-1_-1"],
            [("r0", "f32[8,5]"), ("r1", "s32[3]")]))),
        (Opcode.REVERSE, Case("reverse", one(
            "reverse", ["x: f32[3,4,2]", "y: s64[5]"],
            ["  %r0 = f32[3,4,2] reverse(%x), dimensions={0,2}", "  %r1 = s64[5] reverse(%y), dimensions={0}"],
            [("r0", "f32[3,4,2]"), ("r1", "s64[5]")]))),
        (Opcode.GATHER, Case("gather", one(
            "gather", ["x: f32[5,6]", "i: s32[4,1]", "y: s32[4,3]", "j: s64[2,2]"],
            ["  %r0 = f32[4,6] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
             "index_vector_dim=1, slice_sizes={1,6}",
             "  %r1 = s32[2,2,2] gather(%y, %j), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, "
             "index_vector_dim=1, slice_sizes={2,2}"],
            [("r0", "f32[4,6]"), ("r1", "s32[2,2,2]")]), oob_indices)),
        (Opcode.SCATTER, Case("scatter", one(
            "scatter", ["x: f32[5,3]", "i: s32[4,1]", "u: f32[4,3]", "y: s32[6]", "j: s32[3,1]", "v: s32[3,2]"],
            ["  %r0 = f32[5,3] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
             "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add_f32",
             "  %r1 = s32[6] scatter(%y, %j, %v), update_window_dims={1}, inserted_window_dims={}, "
             "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add_s32"],
            [("r0", "f32[5,3]"), ("r1", "s32[6]")]), oob_indices)),
        (Opcode.DYNAMIC_RESHAPE, Case("dynamic-reshape", one(
            "dynamic_reshape", ["x: s32[2,3]", "a: s32[]", "b: s32[]", "y: f32[6]", "c: s32[]"],
            ["  %r0 = s32[<=3,<=4] dynamic-reshape(%x, %a, %b)", "  %r1 = f32[<=6] dynamic-reshape(%y, %c)"],
            [("r0", "s32[<=3,<=4]"), ("r1", "f32[<=6]")]),
            lambda rng, args: [args[0], np.int32(3), np.int32(2), args[3], np.int32(6)])),
        (Opcode.GET_DIMENSION_SIZE, Case("get-dimension-size", one(
            "get_dimension_size", ["x: f32[3,5]"],
            ["  %r0 = s32[] get-dimension-size(%x), dimensions={1}",
             "  %r1 = s32[] get-dimension-size(%x), dimensions={0}"],
            [("r0", "s32[]"), ("r1", "s32[]")]))),
        (Opcode.SET_DIMENSION_SIZE, Case("set-dimension-size", one(
            "set_dimension_size", ["x: f32[3,5]"],
            ["  %n = s32[] constant(2)", "  %r0 = f32[3,<=5] set-dimension-size(%x, %n), dimensions={1}"],
            [("r0", "f32[3,<=5]")]))),
        (Opcode.IOTA, Case("iota", one(
            "iota", [],
            ["  %r0 = s32[3,4] iota(), iota_dimension=1", "  %r1 = f32[5] iota(), iota_dimension=0",
             "  %r2 = u8[2,3] iota(), iota_dimension=0", "  %r3 = bf16[300] iota(), iota_dimension=0"],
            [("r0", "s32[3,4]"), ("r1", "f32[5]"), ("r2", "u8[2,3]"), ("r3", "bf16[300]")]))),
        (Opcode.CONSTANT, Case("constant", one(
            "constant", [],
            ["  %r0 = f32[2,3] constant({ { 1, -2.5, 3 }, { inf, -0, 1e-30 } })", "  %r1 = s32[] constant(-7)",
             "  %r2 = pred[3] constant({1, 0, 1})", "  %r3 = bf16[2] constant({1.5, -3})",
             "  %r4 = f16[2] constant({0.1, 65504})", "  %r5 = s64[1] constant({-9223372036854775808})",
             "  %r6 = u8[0] constant({})"],
            [("r0", "f32[2,3]"), ("r1", "s32[]"), ("r2", "pred[3]"), ("r3", "bf16[2]"), ("r4", "f16[2]"),
             ("r5", "s64[1]"), ("r6", "u8[0]")]))),
        (Opcode.PARAMETER, Case("parameter", one(
            "parameter", ["x: f32[3]", "y: s8[2,2]"], [],
            [("x", "f32[3]"), ("y", "s8[2,2]")]))),
    ]


COND_BODY = """
%cond (t: (s32[], f32[3])) -> pred[] {
  %t = (s32[], f32[3]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (t: (s32[], f32[3])) -> (s32[], f32[3]) {
  %t = (s32[], f32[3]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[3] get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %x1 = f32[3] multiply(%x, %x)
  %half = f32[] constant(0.5)
  %h = f32[3] broadcast(%half), dimensions={}
  %x2 = f32[3] multiply(%x1, %h)
  ROOT %r = (s32[], f32[3]) tuple(%i1, %x2)
}
%neg (x: f32[3]) -> f32[3] {
  %x = f32[3] parameter(0)
  ROOT %n = f32[3] negate(%x)
}
%double (x: f32[3]) -> f32[3] {
  %x = f32[3] parameter(0)
  ROOT %d = f32[3] add(%x, %x)
}
%keep (x: f32[3]) -> f32[3] {
  ROOT %x = f32[3] parameter(0)
}
%fused (a: f32[4,3], b: f32[3]) -> (f32[4,3], f32[4]) {
  %a = f32[4,3] parameter(0)
  %b = f32[3] parameter(1)
  %bb = f32[4,3] broadcast(%b), dimensions={1}
  %m = f32[4,3] multiply(%a, %bb)
  %e = f32[4,3] exponential(%m)
  %z = f32[] constant(0)
  %s = f32[4] reduce(%e, %z), dimensions={1}, to_apply=%add_f32
  ROOT %t = (f32[4,3], f32[4]) tuple(%e, %s)
}
%fused_reduce (a: f32[4,3]) -> f32[4] {
  %a = f32[4,3] parameter(0)
  %z = f32[] constant(0)
  ROOT %s = f32[4] reduce(%a, %z), dimensions={1}, to_apply=%add_f32
}
%scale (x: f32[2,3], s: f32[]) -> f32[2,3] {
  %x = f32[2,3] parameter(0)
  %s = f32[] parameter(1)
  %b = f32[2,3] broadcast(%s), dimensions={}
  ROOT %m = f32[2,3] multiply(%x, %b)
}
%scalar_mix (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %m = f32[] multiply(%x, %y)
  ROOT %a = f32[] add(%m, %y)
}
"""


def _compute_cases() -> list[tuple[Opcode, Case]]:
    comps = ADD_F32 + COND_BODY

    def one(name, params, lines, results):
        return module(name, params, lines, results, comps)

    return [
        (Opcode.REDUCE, Case("reduce", one(
            "reduce", ["x: f32[5,7]", "y: s32[3,4,2]", "h: f16[6]", "p: pred[3,5]", "v: f32[9]", "iv: s32[9]"],
            ["  %zf = f32[] constant(0)", "  %zi = s32[] constant(0)", "  %mh = f16[] constant(-inf)",
             "  %fp = pred[] constant(false)", "  %ninf = f32[] constant(-inf)", "  %m1 = s32[] constant(-1)",
             "  %r0 = f32[5] reduce(%x, %zf), dimensions={1}, to_apply=%add_f32",
             "  %r1 = f32[7] reduce(%x, %zf), dimensions={0}, to_apply=%add_f32",
             "  %r2 = s32[4] reduce(%y, %zi), dimensions={0,2}, to_apply=%add_s32",
             "  %r3 = f16[] reduce(%h, %mh), dimensions={0}, to_apply=%max_f16",
             "  %r4 = pred[3] reduce(%p, %fp), dimensions={1}, to_apply=%or_pred",
             "  %r5 = (f32[], s32[]) reduce(%v, %iv, %ninf, %m1), dimensions={0}, to_apply=%argmax",
             "  %r5v = f32[] get-tuple-element(%r5), index=0", "  %r5i = s32[] get-tuple-element(%r5), index=1"],
            [("r0", "f32[5]"), ("r1", "f32[7]"), ("r2", "s32[4]"), ("r3", "f16[]"), ("r4", "pred[3]"),
             ("r5v", "f32[]"), ("r5i", "s32[]")]))),
        (Opcode.REDUCE_WINDOW, Case("reduce-window", one(
            "reduce_window", ["x: f32[6,7]", "h: f16[9]"],
            ["  %zf = f32[] constant(0)", "  %mh = f16[] constant(-inf)",
             "  %r0 = f32[3,4] reduce-window(%x, %zf), window={size=3x2 stride=2x2 pad=1_0x0_1}, to_apply=%add_f32",
             "  %r1 = f16[4] reduce-window(%h, %mh), window={size=3 stride=2 pad=0_1 rhs_dilate=1}, "
             "to_apply=%max_f16",
             "  %r2 = f32[6,7] reduce-window(%x, %zf), window={size=3x3 pad=1_1x1_1}, to_apply=%add_f32"],
            [("r0", "f32[3,4]"), ("r1", "f16[4]"), ("r2", "f32[6,7]")]))),
        (Opcode.SELECT_AND_SCATTER, Case("select-and-scatter", one(
            "select_and_scatter", ["x: f32[5,6]", "s: f32[3,3]"],
            ["  %zf = f32[] constant(0)",
             "  %r0 = f32[5,6] select-and-scatter(%x, %s, %zf), window={size=3x2 stride=2x2 pad=1_1x0_0}, "
             "select=%ge_f32, scatter=%add_f32"],
            [("r0", "f32[5,6]")]))),
        (Opcode.DOT, Case("dot", one(
            "dot", ["a: f32[3,5]", "b: f32[5,4]", "c: s32[2,3,4]", "d: s32[2,4,3]", "e: f64[6]", "f: f64[6]",
                    "g: bf16[2,3]", "h: bf16[3]"],
            ["  %r0 = f32[3,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
             "  %r1 = s32[2,3,3] dot(%c, %d), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
             "rhs_contracting_dims={1}",
             "  %r2 = f64[] dot(%e, %f), lhs_contracting_dims={0}, rhs_contracting_dims={0}",
             "  %r3 = bf16[2] dot(%g, %h), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
             "  %r4 = f32[3,5,5,4] dot(%a, %b), lhs_contracting_dims={}, rhs_contracting_dims={}"],
            [("r0", "f32[3,4]"), ("r1", "s32[2,3,3]"), ("r2", "f64[]"), ("r3", "bf16[2]"),
             ("r4", "f32[3,5,5,4]")]))),
        (Opcode.CONVOLUTION, Case("convolution", one(
            "convolution", ["x: f32[2,7,6,4]", "w: f32[3,2,4,5]", "d: f32[1,5,5,4]", "k: f32[3,3,1,4]"],
            ["  %r0 = f32[2,4,3,5] convolution(%x, %w), window={size=3x2 stride=2x2 pad=1_1x0_1}, "
             "dim_labels=b01f_01io->b01f",
             "  %r1 = f32[1,5,5,4] convolution(%d, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
             "feature_group_count=4",
             "  %r2 = f32[2,13,4,5] convolution(%x, %w), window={size=3x2 pad=1_1x0_0 lhs_dilate=2x1 rhs_dilate=1x2}, "
             "dim_labels=b01f_01io->b01f"],
            [("r0", "f32[2,4,3,5]"), ("r1", "f32[1,5,5,4]"), ("r2", "f32[2,13,4,5]")]))),
        (Opcode.TUPLE, Case("tuple", one(
            "tuple", ["x: f32[3]", "y: s32[]"],
            ["  %t = (f32[3], s32[]) tuple(%x, %y)", "  %n = f32[3] negate(%x)"],
            [("n", "f32[3]"), ("y", "s32[]"), ("x", "f32[3]")]))),
        (Opcode.GET_TUPLE_ELEMENT, Case("get-tuple-element", one(
            "get_tuple_element", ["x: f32[3]", "y: s32[]"],
            ["  %t = (f32[3], s32[]) tuple(%x, %y)", "  %a = s32[] get-tuple-element(%t), index=1",
             "  %b = f32[3] get-tuple-element(%t), index=0", "  %c = f32[3] abs(%b)"],
            [("a", "s32[]"), ("c", "f32[3]")]))),
        (Opcode.CALL, Case("call", one(
            "call", ["x: f32[2,3]", "s: f32[]", "a: f32[]"],
            ["  %r0 = f32[2,3] call(%x, %s), to_apply=%scale",
             "  %r1 = f32[] call(%a, %s), to_apply=%scalar_mix"],
            [("r0", "f32[2,3]"), ("r1", "f32[]")]))),
        (Opcode.FUSION, Case("fusion", one(
            "fusion", ["a: f32[4,3]", "b: f32[3]"],
            ["  %f = (f32[4,3], f32[4]) fusion(%a, %b), kind=kLoop, calls=%fused",
             "  %f0 = f32[4,3] get-tuple-element(%f), index=0", "  %f1 = f32[4] get-tuple-element(%f), index=1",
             "  %g = f32[4] fusion(%a), kind=kInput, calls=%fused_reduce"],
            [("f0", "f32[4,3]"), ("f1", "f32[4]"), ("g", "f32[4]")]))),
        (Opcode.WHILE, Case("while", one(
            "while", ["x: f32[3]"],
            ["  %z = s32[] constant(0)", "  %t = (s32[], f32[3]) tuple(%z, %x)",
             "  %w = (s32[], f32[3]) while(%t), condition=%cond, body=%body",
             "  %i = s32[] get-tuple-element(%w), index=0", "  %v = f32[3] get-tuple-element(%w), index=1"],
            [("i", "s32[]"), ("v", "f32[3]")]))),
        (Opcode.CONDITIONAL, Case("conditional", one(
            "conditional", ["p: pred[]", "k: s32[]", "x: f32[3]"],
            ["  %r0 = f32[3] conditional(%p, %x, %x), true_computation=%neg, false_computation=%double",
             "  %r1 = f32[3] conditional(%k, %x, %x, %x), branch_computations={%neg, %double, %keep}"],
            [("r0", "f32[3]"), ("r1", "f32[3]")]),
            lambda rng, args: [args[0], np.int32(rng.integers(-1, 4)), args[2]])),
        (Opcode.MAP, Case("map", one(
            "map", ["x: f32[2,3]", "y: f32[2,3]"],
            ["  %r0 = f32[2,3] map(%x, %y), dimensions={0,1}, to_apply=%scalar_mix"],
            [("r0", "f32[2,3]")]))),
        (Opcode.SORT, Case("sort", one(
            "sort", ["x: f32[3,7]", "y: f32[9]", "iy: s32[9]"],
            ["  %r0 = f32[3,7] sort(%x), dimensions={1}, to_apply=%gt_f32",
             "  %r1 = (f32[9], s32[9]) sort(%y, %iy), dimensions={0}, to_apply=%lt_f32",
             "  %a = f32[9] get-tuple-element(%r1), index=0", "  %b = s32[9] get-tuple-element(%r1), index=1",
             "  %r2 = f32[3,7] sort(%x), dimensions={0}, is_stable=true, to_apply=%gt_f32"],
            [("r0", "f32[3,7]"), ("a", "f32[9]"), ("b", "s32[9]"), ("r2", "f32[3,7]")]),
            lambda rng, args: [args[0], np.round(args[1]), args[2]])),  # ties: stability shows
        (Opcode.TOPK, Case("topk", one(
            "topk", ["x: f32[3,8]", "y: s32[6]"],
            ["  %t0 = (f32[3,3], s32[3,3]) topk(%x), k=3, largest=true",
             "  %a = f32[3,3] get-tuple-element(%t0), index=0", "  %b = s32[3,3] get-tuple-element(%t0), index=1",
             "  %t1 = (s32[2], s32[2]) topk(%y), k=2, largest=false",
             "  %c = s32[2] get-tuple-element(%t1), index=0", "  %d = s32[2] get-tuple-element(%t1), index=1"],
            [("a", "f32[3,3]"), ("b", "s32[3,3]"), ("c", "s32[2]"), ("d", "s32[2]")]))),
        (Opcode.CUSTOM_CALL, Case("custom-call", one(
            "custom_call", ["x: f32[3,8]"],
            ["  %t = (f32[3,4], s32[3,4]) custom-call(%x), custom_call_target=\"TopK\", called_computations={%gt_f32}",
             "  %a = f32[3,4] get-tuple-element(%t), index=0", "  %b = s32[3,4] get-tuple-element(%t), index=1"],
            [("a", "f32[3,4]"), ("b", "s32[3,4]")]))),
        (Opcode.OPTIMIZATION_BARRIER, Case("opt-barrier", one(
            "opt_barrier", ["x: f32[3]", "y: s32[2]"],
            ["  %t = (f32[3], s32[2]) tuple(%x, %y)", "  %b = (f32[3], s32[2]) opt-barrier(%t)",
             "  %a = f32[3] get-tuple-element(%b), index=0", "  %c = s32[2] get-tuple-element(%b), index=1"],
            [("a", "f32[3]"), ("c", "s32[2]")]))),
        (Opcode.PARTITION_ID, Case("partition-id", one(
            "partition_id", [], ["  %r0 = u32[] partition-id()"], [("r0", "u32[]")]))),
        (Opcode.REPLICA_ID, Case("replica-id", one(
            "replica_id", [], ["  %r0 = u32[] replica-id()"], [("r0", "u32[]")]))),
        (Opcode.AFTER_ALL, Case("after-all", one(
            "after_all", ["x: f32[3]"],
            ["  %a = token[] after-all()", "  %b = token[] after-all(%a, %a)", "  %r0 = f32[3] negate(%x)"],
            [("r0", "f32[3]")]))),
    ]


def _complex_cases() -> list[tuple[Opcode, Case]]:
    """c64/c128: building, taking apart, the arithmetic XLA defines on them, and fft (inputs scaled to ~1,
    so that the f32 tolerance's atol also holds for the near-zero frequencies)."""
    complex_ = module("complex", ["a: f32[7]", "b: f32[7]", "c: f64[7]", "d: f64[7]"],
                      ["  %r0 = c64[7] complex(%a, %b)", "  %r1 = c128[7] complex(%c, %d)"],
                      [("r0", "c64[7]"), ("r1", "c128[7]")])
    real = module("real", ["a: c64[7]", "b: c128[7]"], ["  %r0 = f32[7] real(%a)", "  %r1 = f64[7] real(%b)"],
                  [("r0", "f32[7]"), ("r1", "f64[7]")])
    imag = module("imag", ["a: c64[7]", "b: c128[7]"], ["  %r0 = f32[7] imag(%a)", "  %r1 = f64[7] imag(%b)"],
                  [("r0", "f32[7]"), ("r1", "f64[7]")])
    params, lines, results = [], [], []
    for t, r in (("c64", "f32"), ("c128", "f64")):
        params += [f"x{t}: {t}[7]", f"y{t}: {t}[7]", f"f{t}: {r}[7]"]
        ops = [f"%add{t} = {t}[7] add(%x{t}, %y{t})", f"%sub{t} = {t}[7] subtract(%x{t}, %y{t})",
               f"%mul{t} = {t}[7] multiply(%x{t}, %y{t})", f"%div{t} = {t}[7] divide(%x{t}, %y{t})",
               f"%neg{t} = {t}[7] negate(%x{t})", f"%abs{t} = {r}[7] abs(%x{t})",
               f"%exp{t} = {t}[7] exponential(%x{t})", f"%log{t} = {t}[7] log(%x{t})",
               f"%sqrt{t} = {t}[7] sqrt(%x{t})", f"%sign{t} = {t}[7] sign(%x{t})",
               f"%eq{t} = pred[7] compare(%x{t}, %x{t}), direction=EQ",
               f"%ne{t} = pred[7] compare(%x{t}, %y{t}), direction=NE",
               f"%sel{t} = {t}[7] select(%ne{t}, %x{t}, %y{t})", f"%cvt{t} = {t}[7] convert(%f{t})",
               f"%k{t} = {t}[] constant((1.5, -2))", f"%kb{t} = {t}[7] broadcast(%k{t}), dimensions={{}}",
               f"%kx{t} = {t}[7] multiply(%kb{t}, %x{t})"]
        lines += ["  " + line for line in ops]
        results += [(line.split()[0][1:], line.split()[2]) for line in ops if not line.startswith(f"%k{t} =")]
    lines.append("  %widen = c128[7] convert(%xc64)")
    results.append(("widen", "c128[7]"))
    arith = module("complex_arith", params, lines, results)
    fft = module("fft", ["a: c64[3,4,6]", "b: f32[5,12]", "c: c128[2,7,5]", "d: c64[2,97]"], [
        "  %r0 = c64[3,4,6] fft(%a), fft_type=FFT, fft_length={4,6}",
        "  %r1 = c64[3,4,6] fft(%a), fft_type=IFFT, fft_length={3,4,6}",
        "  %r2 = c64[5,7] fft(%b), fft_type=RFFT, fft_length={12}",
        "  %r3 = f64[2,7,8] fft(%c), fft_type=IRFFT, fft_length={7,8}",
        "  %r4 = c64[2,97] fft(%d), fft_type=FFT, fft_length={97}"],
        [("r0", "c64[3,4,6]"), ("r1", "c64[3,4,6]"), ("r2", "c64[5,7]"), ("r3", "f64[2,7,8]"), ("r4", "c64[2,97]")])
    return [
        (Opcode.COMPLEX, Case("complex", complex_)),
        (Opcode.REAL, Case("real", real)),
        (Opcode.IMAG, Case("imag", imag)),
        (Opcode.MULTIPLY, Case("complex-arith", arith)),
        (Opcode.FFT, Case("fft", fft, lambda rng, args: [a / a.dtype.type(16) for a in args])),
    ]


def _refused() -> dict[Opcode, tuple[str, str]]:
    """Opcodes the backend refuses: (a module using it, the reason its CodegenUnsupported gives)."""
    rng = "random number generation is not supported by the CPU backend"
    return {
        Opcode.RNG: (module("rng", [], ["  %a = f32[] constant(0)", "  %b = f32[] constant(1)",
                                        "  %r0 = f32[4] rng(%a, %b), distribution=rng_uniform"],
                            [("r0", "f32[4]")]), rng),
        Opcode.RNG_BIT_GENERATOR: (module("rng_bit_generator", ["s: u64[2]"],
                                          ["  %r0 = (u64[2], u32[4]) rng-bit-generator(%s), algorithm=rng_default"],
                                          [("r0", "(u64[2], u32[4])")]), rng),
        Opcode.RNG_GET_AND_UPDATE_STATE: (module("rng_get_and_update_state", [],
                                                 ["  %r0 = u64[2] rng-get-and-update-state(), delta=1"],
                                                 [("r0", "u64[2]")]), rng),
    }


def _cases() -> dict[Opcode, list[Case]]:
    table: dict[Opcode, list[Case]] = {}
    for op, case in (_unary_cases() + _binary_cases() + _other_elementwise_cases() + _data_movement_cases()
                     + _compute_cases() + _complex_cases()):
        table.setdefault(op, []).append(case)
    return table


CASES = _cases()
REFUSED = _refused()
ALL_CASES = [(op, case) for op, cases in CASES.items() for case in cases]


def test_every_opcode_is_covered() -> None:
    """No opcode is silently untested: each has cases that run, or an explicit refusal with its reason."""
    missing = [op.text for op in Opcode if op not in CASES and op not in REFUSED]
    both = [op.text for op in CASES if op in REFUSED]
    assert not missing, f"opcodes with neither a CPU backend test case nor a refusal: {missing}"
    assert not both, f"opcodes both tested and refused: {both}"


@pytest.fixture(scope="module")
def compiled(kernel_cache):
    return compile_many({case.id: case.text for _, case in ALL_CASES}, kernel_cache)


@pytest.mark.parametrize("op, case", ALL_CASES, ids=[case.id for _, case in ALL_CASES])
def test_opcode_matches_evaluator(op: Opcode, case: Case, compiled) -> None:
    exe = compiled[case.id].get()
    assert any(inst.opcode is op for comp in exe.module.computations for inst in comp.instructions), \
        f"case {case.id} does not use {op.text}"
    args = random_args(exe.module, seed=len(case.id))
    if case.args is not None:
        args = case.args(np.random.default_rng(len(case.id)), args)
    check_module(exe, args, what=case.id)


@pytest.mark.parametrize("op", list(REFUSED), ids=lambda op: op.text)
def test_refused_opcode_says_why(op: Opcode, kernel_cache) -> None:
    text, reason = REFUSED[op]
    module_ = parse(text)
    assert any(inst.opcode is op for inst in module_.entry.instructions)
    with pytest.raises(CodegenUnsupported, match=reason):
        compile_text(module_, kernel_cache)
