"""TF's random distributions (tensorflow/core/lib/random/random_distributions.h) over Philox words.

Each function maps the words of ``n`` Philox blocks (u32[n, 4]) to ``n * k`` values, ``k`` values per
block in the order TF's CPU kernel writes them (``FillPhiloxRandom``: block ``g`` is the generator
skipped ``g`` times and fills elements ``g*k .. g*k+k-1``):

* uniform floats: mantissa bits under the exponent of 1.0, minus 1.0. f32 takes the low 23 bits of a
  word, f16 the low 10, bf16 the low 7 (k = 4); f64 takes 20 bits of one word and all 32 of the next
  (k = 2).
* normal: Box-Muller on pairs of uniforms, ``u1`` clamped below at 1e-7, ``v = 2*pi*u2`` formed in
  double and rounded to float (as C evaluates ``2.0f * M_PI * u``), ``sqrt(-2 log u1) * (sin v, cos v)``.
  f16/bf16 compute in f32 and round. f64 pairs use two words per uniform (k = 2).
* integers in ``[lo, hi)``: ``lo + word % (hi - lo)`` with the range unsigned and the sum wrapping; 64-bit
  types use ``w0 | w1 << 32`` (k = 2). Full-range integers are the word(s) themselves.

Bit-exactness: every distribution reproduces TF's CPU kernel bit for bit. The f32 Box-Muller transform
calls glibc's ``logf`` and ``sincosf``, which are not correctly rounded, so ``_glibc_f32`` builds the
same double-precision sequences; f64 uses the ``log``/``sin``/``cos`` opcodes, which the CPU backend
computes with glibc (correctly rounded in practice; the HLO evaluator's NumPy ``log`` can differ by
an ulp).
"""

from __future__ import annotations

import math
from typing import Callable

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.ops import _glibc_f32 as glibc
from hlo.lowering.ops._philox import Ops, dims_of
from hlo.opcodes import Opcode
from hlo.shapes import Shape

# Per float type: (unsigned type of its width, mantissa mask, bits of 1.0) for the mantissa trick.
_ONE = {P.F32: (P.U32, 0x7FFFFF, 0x3F800000), P.F16: (P.U16, 0x3FF, 0x3C00), P.BF16: (P.U16, 0x7F, 0x3F80)}
_EPSILON = 1.0e-7
_TWO_PI = 2.0 * math.pi  # the double 2 * M_PI


def per_block(dtype: P) -> int:
    """Values one Philox block gives (TF's ``kResultElementCount``)."""
    return 2 if dtype.bit_width == 64 else 4


def _uniform_narrow(ops: Ops, w: Value, dtype: P) -> Value:
    utype, mask, one = _ONE[dtype]
    bits = ops.op(Opcode.OR, ops.op(Opcode.AND, ops.convert(w, utype), mask), one)
    x = ops.bitcast(bits, dtype)
    return ops.b.subtract(x, ops.like(1, x))


def _uniform_f64(ops: Ops, hi: Value, lo: Value) -> Value:
    bits = ops.op(Opcode.OR, ops.u64(lo, ops.op(Opcode.AND, hi, 0xFFFFF)), 0x3FF0000000000000)
    x = ops.bitcast(bits, P.F64)
    return ops.b.subtract(x, ops.like(1, x))


def _pairs(ops: Ops, words: Value) -> tuple[Value, Value]:
    """Columns (0, 2) and (1, 3) of u32[n, 4] as u32[n, 2]: the first and second word of each pair."""
    n = dims_of(words)[0]
    w = ops.reshape(words, (n, 2, 2))
    return ops.take(w, 2, 0), ops.take(w, 2, 1)


def _flat(ops: Ops, v: Value) -> Value:
    return ops.reshape(v, (dims_of(v)[0] * dims_of(v)[1],))


def uniform(ops: Ops, words: Value, dtype: P) -> Value:
    if dtype == P.F64:
        first, second = _pairs(ops, words)
        return _flat(ops, _uniform_f64(ops, first, second))
    return _flat(ops, _uniform_narrow(ops, words, dtype))


def _box_muller(ops: Ops, u1: Value, u2: Value, dtype: P) -> tuple[Value, Value]:
    """TF's BoxMullerFloat (dtype f32) / BoxMullerDouble (f64) on uniforms in [0, 1)."""
    eps = ops.like(_EPSILON, u1)
    u1 = ops.b.select(ops.compare(u1, eps, "LT"), eps, u1)
    if dtype == P.F64:
        v = ops.b.multiply(ops.like(_TWO_PI, u2), u2)
        radius = ops.b.sqrt(ops.b.multiply(ops.like(-2.0, u1), ops.b.log(u1)))
        return ops.b.multiply(ops.b.sine(v), radius), ops.b.multiply(ops.b.cosine(v), radius)
    v = ops.convert(ops.b.multiply(ops.like(_TWO_PI, ops.convert(u2, P.F64)), ops.convert(u2, P.F64)), P.F32)
    radius = ops.b.sqrt(ops.b.multiply(ops.like(-2.0, u1), glibc.logf(ops, u1)))
    sin, cos = glibc.sincosf(ops, v)  # 0 <= v < 2 pi
    return ops.b.multiply(sin, radius), ops.b.multiply(cos, radius)


def normal_pairs(ops: Ops, words: Value, dtype: P) -> tuple[Value, Value]:
    """Box-Muller on each block: the sines and the cosines, [n, pairs] each; narrow floats make two pairs
    (words 0-1 and 2-3) in f32, f64 one pair (from all four words)."""
    if dtype == P.F64:
        first, second = _pairs(ops, words)
        u = _uniform_f64(ops, first, second)  # [n, 2]: u1, u2
        n = dims_of(words)[0]
        u1, u2 = (ops.reshape(ops.take(u, 1, i), (n, 1)) for i in (0, 1))
        return _box_muller(ops, u1, u2, P.F64)
    first, second = _pairs(ops, words)
    return _box_muller(ops, _uniform_narrow(ops, first, P.F32), _uniform_narrow(ops, second, P.F32), P.F32)


def normal(ops: Ops, words: Value, dtype: P) -> Value:
    sines, cosines = normal_pairs(ops, words, dtype)
    n, pairs = dims_of(sines)
    both = ops.reshape(ops.stack_last([sines, cosines]), (n * pairs * 2,))  # per block: s0 c0 (s1 c1)
    return ops.convert(both, dtype)


def full_int(ops: Ops, words: Value, dtype: P) -> Value:
    if dtype.bit_width == 64:
        first, second = _pairs(ops, words)
        return ops.bitcast(_flat(ops, ops.u64(first, second)), dtype)
    return ops.bitcast(_flat(ops, words), dtype)


def uniform_int(ops: Ops, words: Value, dtype: P, lo: Value, hi: Value) -> Value:
    """``lo + bits % (hi - lo)`` with ``lo``/``hi`` scalars of ``dtype`` (signed 32/64-bit)."""
    utype = P.U64 if dtype.bit_width == 64 else P.U32
    bits = full_int(ops, words, utype)
    ulo, uhi = ops.bitcast(lo, utype), ops.bitcast(hi, utype)
    dims = dims_of(bits)
    span = ops.broadcast(ops.b.subtract(uhi, ulo), dims, ())
    offset = ops.b.remainder(bits, span)
    return ops.bitcast(ops.b.add(ops.broadcast(ulo, dims, ()), offset), dtype)


DISTRIBUTIONS: dict[str, Callable[[Ops, Value, P], Value]] = {
    "uniform": uniform, "normal": normal, "full_int": full_int,
}


# --- truncated normal: TF's rejection loop ---------------------------------------------------------

TRUNCATE = 2.0  # |x| < 2 is kept
SAMPLES_PER_OUTPUT = 256  # TF's kReservedSamplesPerOutput: group g starts at u32 sample g * k * 256


def truncated_blocks_per_group(dtype: P) -> int:
    """How far apart (in Philox blocks) the groups' generators start: ``k * 256 / 4``."""
    return per_block(dtype) * SAMPLES_PER_OUTPUT // 4


def truncated_round(ops: Ops, words: Value, dtype: P, count: Value, results: Value) -> tuple[Value, Value]:
    """One pass of the loop over one Philox block per group: the block's Box-Muller values (two pairs for
    narrow floats, one for f64) in TF's order, each kept when ``|x| < 2`` at position ``count`` of its
    group until the group holds ``k`` values. ``count`` s32[n], ``results`` [n, k] in the compute type."""
    sines, cosines = normal_pairs(ops, words, dtype)
    n, k = dims_of(results)
    slots = ops.b.iota(shape=Shape.array(P.S32, (n, k)), iota_dimension=1)
    for j in range(dims_of(sines)[1]):
        for v in (ops.take(sines, 1, j), ops.take(cosines, 1, j)):
            keep = ops.b.op(Opcode.AND, ops.compare(ops.b.abs(v), ops.like(TRUNCATE, v), "LT"),
                            ops.compare(count, ops.like(k, count), "LT"))
            here = ops.b.op(Opcode.AND, ops.compare(slots, ops.broadcast(count, (n, k), (0,)), "EQ"),
                            ops.broadcast(keep, (n, k), (0,)))
            results = ops.b.select(here, ops.broadcast(v, (n, k), (0,)), results)
            count = ops.b.add(count, ops.convert(keep, P.S32))
    return count, results

