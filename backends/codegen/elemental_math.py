"""Elemental rules for elementwise math: unary, binary, compare, select, clamp, convert.

Each opcode maps to a C template per compute kind: ``f`` (float, also used
for f16/bf16), ``d`` (double), ``i`` (signed or unsigned integers, through
the typed helpers of the prelude), ``p`` (pred), and ``c``/``z`` (c64/c128 as
C99 complex types, with the helpers of ``backends/cpu/complex_c.py``; a dialect
without complex storage refuses them before a template is read). Templates take the
operand expressions and the HLO type name (for the ``tfxla_*_s32``-style
helpers). The semantics match the reference evaluator.
"""

from __future__ import annotations

from backends.codegen.dialect import Dialect
from backends.codegen.elemental import ElementalEmitter, Value, array_shape, elemental
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import Index
from hlo.attributes import ComparisonDirection, ComparisonType
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def kind(dialect: Dialect, t: P) -> str:
    if t.is_pred:
        return "p"
    if t.is_integral:
        return "i"
    if t is P.F64:
        return "d"
    if t.is_float:
        return "f"
    if t is P.C64:
        return "c"
    if t is P.C128:
        return "z"
    raise CodegenUnsupported(f"element type {t.value} is not supported by the {dialect.backend} backend")


# opcode -> {kind: template}; {x} is the operand, {n} the HLO type name (s32, u8, ...).
UNARY = {
    Opcode.ABS: {"f": "fabsf({x})", "d": "fabs({x})", "i": "tfxla_abs_{n}({x})", "c": "tfxla_cabsf({x})",
                 "z": "cabs({x})"},
    Opcode.NEGATE: {"f": "-({x})", "d": "-({x})", "i": "({c})(0u - ({c})({x}))", "c": "-({x})", "z": "-({x})"},
    Opcode.SIGN: {"f": "tfxla_signf({x})", "d": "tfxla_sign({x})", "i": "({c})(({x}) > 0) - ({c})(({x}) < 0)",
                  "c": "tfxla_csignf({x})", "z": "tfxla_csign({x})"},
    Opcode.FLOOR: {"f": "floorf({x})", "d": "floor({x})"},
    Opcode.CEIL: {"f": "ceilf({x})", "d": "ceil({x})"},
    Opcode.ROUND_NEAREST_AFZ: {"f": "roundf({x})", "d": "round({x})"},
    Opcode.ROUND_NEAREST_EVEN: {"f": "nearbyintf({x})", "d": "nearbyint({x})"},
    Opcode.EXPONENTIAL: {"f": "tfxla_vexpf({x})", "d": "exp({x})", "c": "cexpf({x})", "z": "cexp({x})"},
    Opcode.EXPONENTIAL_MINUS_ONE: {"f": "tfxla_vexpm1f({x})", "d": "expm1({x})"},
    Opcode.LOG: {"f": "tfxla_vlogf({x})", "d": "log({x})", "c": "clogf({x})", "z": "clog({x})"},
    Opcode.LOG_PLUS_ONE: {"f": "tfxla_vlog1pf({x})", "d": "log1p({x})"},
    Opcode.SQRT: {"f": "sqrtf({x})", "d": "sqrt({x})", "c": "csqrtf({x})", "z": "csqrt({x})"},
    Opcode.RSQRT: {"f": "(1.0f / sqrtf({x}))", "d": "(1.0 / sqrt({x}))", "c": "(1.0f / csqrtf({x}))",
                   "z": "(1.0 / csqrt({x}))"},
    Opcode.CBRT: {"f": "cbrtf({x})", "d": "cbrt({x})"},
    Opcode.TANH: {"f": "tfxla_vtanhf({x})", "d": "tanh({x})", "c": "ctanhf({x})", "z": "ctanh({x})"},
    Opcode.LOGISTIC: {"f": "tfxla_vlogisticf({x})", "d": "tfxla_logistic({x})"},
    Opcode.SINE: {"f": "sinf({x})", "d": "sin({x})", "c": "csinf({x})", "z": "csin({x})"},
    Opcode.COSINE: {"f": "cosf({x})", "d": "cos({x})", "c": "ccosf({x})", "z": "ccos({x})"},
    Opcode.TAN: {"f": "tanf({x})", "d": "tan({x})", "c": "ctanf({x})", "z": "ctan({x})"},
    Opcode.ERF: {"f": "tfxla_verff({x})", "d": "erf({x})"},
    Opcode.NOT: {"p": "!({x})", "i": "({c})~({x})"},
    Opcode.IS_FINITE: {"f": "isfinite({x})", "d": "isfinite({x})"},
    Opcode.POPCNT: {"i": "tfxla_popcnt_{n}({x})"},
    Opcode.CLZ: {"i": "tfxla_clz_{n}({x})"},
    Opcode.COPY: {"f": "{x}", "d": "{x}", "i": "{x}", "p": "{x}", "c": "{x}", "z": "{x}"},
    Opcode.REAL: {"f": "{x}", "d": "{x}", "c": "crealf({x})", "z": "creal({x})"},
    Opcode.IMAG: {"f": "0.0f", "d": "0.0", "c": "cimagf({x})", "z": "cimag({x})"},
}

BINARY = {
    Opcode.ADD: {"f": "({x} + {y})", "d": "({x} + {y})", "i": "({c})(({u})({x}) + ({u})({y}))", "p": "({x} | {y})",
                 "c": "({x} + {y})", "z": "({x} + {y})"},
    Opcode.SUBTRACT: {"f": "({x} - {y})", "d": "({x} - {y})", "i": "({c})(({u})({x}) - ({u})({y}))",
                      "c": "({x} - {y})", "z": "({x} - {y})"},
    Opcode.MULTIPLY: {"f": "({x} * {y})", "d": "({x} * {y})", "i": "({c})(({u})({x}) * ({u})({y}))",
                      "p": "({x} & {y})", "c": "tfxla_cmulf({x}, {y})", "z": "tfxla_cmul({x}, {y})"},
    Opcode.DIVIDE: {"f": "({x} / {y})", "d": "({x} / {y})", "i": "tfxla_div_{n}({x}, {y})", "c": "({x} / {y})",
                    "z": "({x} / {y})"},
    Opcode.REMAINDER: {"f": "tfxla_remf({x}, {y})", "d": "tfxla_rem({x}, {y})", "i": "tfxla_rem_{n}({x}, {y})"},
    Opcode.POWER: {"f": "tfxla_powf({x}, {y})", "d": "tfxla_pow({x}, {y})", "i": "tfxla_pow_{n}({x}, {y})"},
    Opcode.MAXIMUM: {"f": "tfxla_maxf({x}, {y})", "d": "tfxla_max({x}, {y})", "i": "(({x}) >= ({y}) ? ({x}) : ({y}))",
                     "p": "({x} | {y})"},
    Opcode.MINIMUM: {"f": "tfxla_minf({x}, {y})", "d": "tfxla_min({x}, {y})", "i": "(({x}) <= ({y}) ? ({x}) : ({y}))",
                     "p": "({x} & {y})"},
    Opcode.ATAN2: {"f": "atan2f({x}, {y})", "d": "atan2({x}, {y})"},
    Opcode.AND: {"p": "({x} & {y})", "i": "({c})({x} & {y})"},
    Opcode.OR: {"p": "({x} | {y})", "i": "({c})({x} | {y})"},
    Opcode.XOR: {"p": "({x} ^ {y})", "i": "({c})({x} ^ {y})"},
    Opcode.SHIFT_LEFT: {"i": "tfxla_shl_{n}({x}, {y})"},
    Opcode.SHIFT_RIGHT_LOGICAL: {"i": "tfxla_shrl_{n}({x}, {y})"},
    Opcode.SHIFT_RIGHT_ARITHMETIC: {"i": "tfxla_shra_{n}({x}, {y})"},
    Opcode.COMPLEX: {"f": "CMPLXF({x}, {y})", "d": "CMPLX({x}, {y})"},  # keyed by the (real) operands' kind
}

_UNSIGNED_OF = {"int8_t": "uint8_t", "int16_t": "uint16_t", "int32_t": "uint32_t", "int64_t": "uint64_t"}


def _template(em: ElementalEmitter, table: dict[Opcode, dict[str, str]], inst: HloInstruction, t: P) -> str:
    k = kind(em.dialect, t)
    template = table[inst.opcode].get(k)
    if template is None:
        raise CodegenUnsupported(f"%{inst.name}: {inst.opcode.text} on {t.value} is not supported")
    return template


@elemental(*UNARY)
def _unary(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    t = em.operand_shape(inst, 0).dtype
    x = em.operand(inst, 0, idx)
    c = em.dialect.compute(t)
    expr = _template(em, UNARY, inst, t).format(x=x, n=t.value, c=c)
    return em.result(inst, expr)


@elemental(*BINARY)
def _binary(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    t = em.operand_shape(inst, 0).dtype
    x, y = em.operand(inst, 0, idx), em.operand(inst, 1, idx)
    c = em.dialect.compute(t)
    expr = _template(em, BINARY, inst, t).format(x=x, y=y, n=t.value, c=c, u=_UNSIGNED_OF.get(c, c))
    return em.result(inst, expr)


_CMP = {ComparisonDirection.EQ: "==", ComparisonDirection.NE: "!=", ComparisonDirection.LT: "<",
        ComparisonDirection.LE: "<=", ComparisonDirection.GT: ">", ComparisonDirection.GE: ">="}


@elemental(Opcode.COMPARE)
def _compare(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    t = em.operand_shape(inst, 0).dtype
    x, y = em.operand(inst, 0, idx), em.operand(inst, 1, idx)
    if inst.attr("type") is ComparisonType.TOTALORDER and t.is_float:
        f = "tfxla_total_f64" if t is P.F64 else "tfxla_total_f32"
        x, y = f"{f}({x})", f"{f}({y})"
    return em.tmp("int", f"({x} {_CMP[inst.attr('direction')]} {y})")


@elemental(Opcode.SELECT)
def _select(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    pred_idx = idx if em.operand_shape(inst, 0).dims else ()
    p = em.operand(inst, 0, pred_idx)
    a, b = em.operand(inst, 1, idx), em.operand(inst, 2, idx)
    return em.result(inst, f"({p} ? {a} : {b})")


@elemental(Opcode.CLAMP)
def _clamp(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    t = array_shape(inst).dtype
    lo = em.operand(inst, 0, idx if em.operand_shape(inst, 0).dims else ())
    x = em.operand(inst, 1, idx)
    hi = em.operand(inst, 2, idx if em.operand_shape(inst, 2).dims else ())
    mx, mn = BINARY[Opcode.MAXIMUM][kind(em.dialect, t)], BINARY[Opcode.MINIMUM][kind(em.dialect, t)]
    inner = em.tmp(em.dialect.compute(t), mx.format(x=x, y=lo))
    return em.result(inst, mn.format(x=inner, y=hi))


@elemental(Opcode.CONVERT)
def _convert(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    src = em.operand_shape(inst, 0).dtype
    dst = array_shape(inst).dtype
    x = em.operand(inst, 0, idx)
    out = em.dialect.compute(dst)
    if dst.is_pred:
        expr = f"(({x}) != 0)"
    elif dst.is_integral and src.is_float:
        expr = f"tfxla_from_f64_{dst.value}((double)({x}))"
    elif dst.is_integral:
        unsigned = _UNSIGNED_OF.get(out, out)
        expr = f"({out})({unsigned})({x})"
    elif dst is P.F16:
        expr = x  # em.result rounds once, from the source type (f64 -> f32 -> f16 would round twice)
    elif dst is P.BF16:
        expr = f"(float)({x})"  # em.result rounds to bf16 from f32, as XLA and ml_dtypes do
    else:
        expr = f"({out})({x})"
    return em.result(inst, expr)
