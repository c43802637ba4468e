"""glibc's ``logf`` and ``sincosf`` (sysdeps/ieee754/flt-32, the Arm optimized-routines algorithms glibc
has shipped since 2.28) as HLO f64 and integer ops, so that TF's Box-Muller transform (which calls
them) is reproduced bit for bit.

They are not correctly rounded (about 1% of f32 ``log``/``sin``/``cos`` values differ by an ulp from the
correctly rounded ones), so computing in f64 and rounding is not enough. Both compute in double and
round once, so the same double operations in the same order give the same float: the HLO below is
that sequence (the backends do not contract ``a * b + c`` into FMAs: the CPU backend compiles with
``-std=c11``). glibc's FMA build of these functions gives the same floats on the inputs Box-Muller
feeds them, which the tests check exhaustively.

Domains (what Box-Muller feeds them; other inputs are not handled): ``logf`` of normal positive
floats (no zero, subnormal, infinity or NaN); ``sincosf`` of ``0 <= x < 120``.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.ops._philox import Ops, dims_of
from hlo.opcodes import Opcode

H = float.fromhex

# logf: log(x) = log1p(z / c - 1) + log(c) + k ln2 with x = 2^k z, c near z from a 16-entry table.
_LOGF_TABLE = [  # (1/c, log c)
    ("0x1.661ec79f8f3bep+0", "-0x1.57bf7808caadep-2"), ("0x1.571ed4aaf883dp+0", "-0x1.2bef0a7c06ddbp-2"),
    ("0x1.49539f0f010bp+0", "-0x1.01eae7f513a67p-2"), ("0x1.3c995b0b80385p+0", "-0x1.b31d8a68224e9p-3"),
    ("0x1.30d190c8864a5p+0", "-0x1.6574f0ac07758p-3"), ("0x1.25e227b0b8eap+0", "-0x1.1aa2bc79c81p-3"),
    ("0x1.1bb4a4a1a343fp+0", "-0x1.a4e76ce8c0e5ep-4"), ("0x1.12358f08ae5bap+0", "-0x1.1973c5a611cccp-4"),
    ("0x1.0953f419900a7p+0", "-0x1.252f438e10c1ep-5"), ("0x1p+0", "0x0p+0"),
    ("0x1.e608cfd9a47acp-1", "0x1.aa5aa5df25984p-5"), ("0x1.ca4b31f026aap-1", "0x1.c5e53aa362eb4p-4"),
    ("0x1.b2036576afce6p-1", "0x1.526e57720db08p-3"), ("0x1.9c2d163a1aa2dp-1", "0x1.bc2860d22477p-3"),
    ("0x1.886e6037841edp-1", "0x1.1058bc8a07ee1p-2"), ("0x1.767dcf5534862p-1", "0x1.4043057b6ee09p-2"),
]
_LOGF_LN2 = H("0x1.62e42fefa39efp-1")
_LOGF_POLY = (H("-0x1.00ea348b88334p-2"), H("0x1.5575b0be00b6ap-2"), H("-0x1.ffffef20a4123p-2"))
_LOGF_OFF = 0x3F330000

# sincosf: reduce by pi/2 (x - n pi/2, n from x * 2/pi scaled by 2^24), then two polynomials.
_HPI_INV = H("0x1.45F306DC9C883p+23")  # 2/pi * 2^24
_HPI = H("0x1.921FB54442D18p0")
_COS = (1.0, H("-0x1.ffffffd0c621cp-2"), H("0x1.55553e1068f19p-5"), H("-0x1.6c087e89a359dp-10"),
        H("0x1.99343027bf8c3p-16"))
_SIN = (H("-0x1.555545995a603p-3"), H("0x1.1107605230bc4p-7"), H("-0x1.994eb3774cf24p-13"))
_TOP12_PIO4 = 0x3F4  # abstop12(pi/4 as a float): below it, no reduction
_TOP12_TINY = 0x398  # abstop12(2^-12): below it, sin x = x and cos x = 1


def _lookup(ops: Ops, index: Value, table: list[float]) -> Value:
    """``table[index]`` (f64) for a u32 ``index`` in ``[0, len(table))``, as a tree of selects on its bits."""
    level = [ops.full(v, P.F64, dims_of(index)) for v in table]
    bit = 0
    while len(level) > 1:
        on = ops.compare(ops.op(Opcode.AND, ops.shr(index, bit), 1), ops.like(1, index), "EQ")
        level = [ops.b.select(on, level[j + 1], level[j]) for j in range(0, len(level), 2)]
        bit += 1
    return level[0]


def logf(ops: Ops, x: Value) -> Value:
    """glibc's ``logf(x)`` for f32 ``x`` (normal, positive)."""
    b = ops.b
    ix = ops.bitcast(x, P.U32)
    tmp = b.subtract(ix, ops.like(_LOGF_OFF, ix))
    i = ops.op(Opcode.AND, ops.shr(tmp, 23 - 4), 15)
    k = ops.convert(b.shift_right_arithmetic(ops.bitcast(tmp, P.S32), ops.full(23, P.S32, dims_of(x))), P.F64)
    iz = b.subtract(ix, ops.op(Opcode.AND, tmp, 0x1FF << 23))
    z = ops.convert(ops.bitcast(iz, P.F32), P.F64)
    invc = _lookup(ops, i, [H(a) for a, _ in _LOGF_TABLE])
    logc = _lookup(ops, i, [H(c) for _, c in _LOGF_TABLE])
    c = lambda v: ops.like(v, z)  # noqa: E731
    r = b.subtract(b.multiply(z, invc), c(1.0))
    y0 = b.add(logc, b.multiply(k, c(_LOGF_LN2)))
    r2 = b.multiply(r, r)
    a0, a1, a2 = _LOGF_POLY
    y = b.add(b.multiply(c(a1), r), c(a2))
    y = b.add(b.multiply(c(a0), r2), y)
    y = b.add(b.multiply(y, r2), b.add(y0, r))
    return ops.convert(y, P.F32)


def _poly(ops: Ops, x: Value, x2: Value, negate_cos: Value | None) -> tuple[Value, Value]:
    """glibc's ``sincosf_poly``: (sin, cos) in f64 of the reduced ``x`` (cosine coefficients negated
    where ``negate_cos``), in its operation order."""
    b = ops.b
    c = lambda v: ops.like(v, x)  # noqa: E731
    cos = [c(v) for v in _COS]
    if negate_cos is not None:
        cos = [b.select(negate_cos, b.negate(v), v) for v in cos]
    x4 = b.multiply(x2, x2)
    x3 = b.multiply(x2, x)
    c2 = b.add(cos[3], b.multiply(x2, cos[4]))
    s1 = b.add(c(_SIN[1]), b.multiply(x2, c(_SIN[2])))
    c1 = b.add(cos[0], b.multiply(x2, cos[1]))
    x5 = b.multiply(x3, x2)
    x6 = b.multiply(x4, x2)
    s = b.add(x, b.multiply(x3, c(_SIN[0])))
    cc = b.add(c1, b.multiply(x4, cos[2]))
    return b.add(s, b.multiply(x5, s1)), b.add(cc, b.multiply(x6, c2))


def sincosf(ops: Ops, y: Value) -> tuple[Value, Value]:
    """glibc's ``sincosf(y)`` for f32 ``0 <= y < 120``: (sin y, cos y) in f32."""
    b = ops.b
    dims = dims_of(y)
    x = ops.convert(y, P.F64)
    top = ops.op(Opcode.AND, ops.shr(ops.bitcast(y, P.U32), 20), 0x7FF)
    # small: no reduction
    small_sin, small_cos = _poly(ops, x, b.multiply(x, x), None)
    # reduce_fast: n = (int(x * 2^24 * 2/pi) + 2^23) >> 24, x - n pi/2; the sign and the cosine
    # polynomial's sign follow the quadrant, odd quadrants swap sine and cosine
    scaled = ops.convert(b.multiply(x, ops.like(_HPI_INV, x)), P.S32)
    n = b.shift_right_arithmetic(b.add(scaled, ops.full(0x800000, P.S32, dims)), ops.full(24, P.S32, dims))
    xr = b.subtract(x, b.multiply(ops.convert(n, P.F64), ops.like(_HPI, x)))
    quadrant = ops.op(Opcode.AND, n, 3)
    flip = ops.compare(ops.op(Opcode.AND, b.add(quadrant, ops.like(1, quadrant)), 2), ops.like(0, n), "NE")
    signed = b.select(flip, b.negate(xr), xr)  # sign = {1, -1, -1, 1}[n & 3]
    neg_cos = ops.compare(ops.op(Opcode.AND, n, 2), ops.like(0, n), "NE")
    rs, rc = _poly(ops, signed, b.multiply(xr, xr), neg_cos)
    odd = ops.compare(ops.op(Opcode.AND, n, 1), ops.like(0, n), "NE")
    red_sin, red_cos = b.select(odd, rc, rs), b.select(odd, rs, rc)
    is_small = ops.compare(top, ops.like(_TOP12_PIO4, top), "LT")
    sin = ops.convert(b.select(is_small, small_sin, red_sin), P.F32)
    cos = ops.convert(b.select(is_small, small_cos, red_cos), P.F32)
    tiny = ops.compare(top, ops.like(_TOP12_TINY, top), "LT")
    return b.select(tiny, y, sin), b.select(tiny, ops.like(1.0, y), cos)
