"""C types for HLO element types: storage type, compute type, and literal text.

f16 is stored as ``_Float16`` and bf16 as ``uint16_t`` (bit pattern); both are
computed in float, as XLA:CPU does. pred is stored as ``uint8_t`` (0 or 1).
"""

from __future__ import annotations

import math

import numpy as np

from hlo.dtypes import PrimitiveType as P

STORAGE = {
    P.PRED: "uint8_t", P.S8: "int8_t", P.S16: "int16_t", P.S32: "int32_t", P.S64: "int64_t",
    P.U8: "uint8_t", P.U16: "uint16_t", P.U32: "uint32_t", P.U64: "uint64_t",
    P.F16: "_Float16", P.BF16: "uint16_t", P.F32: "float", P.F64: "double",
}
COMPUTE = {**STORAGE, P.F16: "float", P.BF16: "float", P.PRED: "int"}


def storage(t: P) -> str:
    try:
        return STORAGE[t]
    except KeyError:
        from backends.cpu.elemental import CodegenUnsupported  # (elemental imports this module)
        raise CodegenUnsupported(f"the CPU backend does not support element type {t.value}") from None


def compute(t: P) -> str:
    storage(t)
    return COMPUTE[t]


def load(t: P, expr: str) -> str:
    """Convert a stored value to its compute type."""
    if t is P.BF16:
        return f"tfxla_bf16_to_f32({expr})"
    if t is P.F16:
        return f"(float)({expr})"
    if t is P.PRED:
        return f"(int)({expr})"
    return expr


def store(t: P, expr: str) -> str:
    """Convert a compute-type value to its storage type."""
    if t is P.BF16:
        return f"tfxla_f32_to_bf16({expr})"
    if t is P.F16:
        return f"(_Float16)({expr})"
    if t is P.PRED:
        return f"(uint8_t)(({expr}) != 0)"
    return expr


def literal(value, t: P) -> str:
    """A C literal of compute type for one element."""
    if t is P.PRED:
        return "1" if bool(value) else "0"
    if t.is_integral:
        v = int(value)
        if t is P.S64:
            return f"INT64_C({v})" if v != -(1 << 63) else "INT64_MIN"
        if t is P.U64:
            return f"UINT64_C({v})"
        if t is P.S32 and v == -(1 << 31):
            return "INT32_MIN"
        if t is P.U32:
            return f"{v}u"
        return str(v)
    f = float(value)
    double = t is P.F64
    if math.isnan(f):
        nan = "NAN" if not double else "(double)NAN"
        return f"(-{nan})" if np.signbit(f) else nan
    if math.isinf(f):
        inf = "INFINITY" if not double else "(double)INFINITY"
        return f"(-{inf})" if f < 0 else inf
    text = repr(f) if double else repr(float(np.float32(f)))
    if "e" not in text and "." not in text:
        text += ".0"
    return text if double else text + "f"


def numpy_to_c_array(arr: np.ndarray, t: P) -> str:
    """The initializer list of a constant array, in row-major order, in storage type."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    if t is P.BF16:
        return ", ".join(str(int(v)) for v in flat.view(np.uint16))
    if t is P.F16:
        return ", ".join(literal(v, P.F32) for v in flat.astype(np.float32))
    return ", ".join(literal(v, t) for v in flat)
