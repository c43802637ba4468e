"""What the elemental rules ask a target for: the ``Dialect`` of C a backend writes.

The elemental emitter and its rules (``backends/codegen/elemental*.py``) write C-family code once;
everything that differs between targets is a member of the dialect object they are given:

* the backend's name, for messages (``CodegenUnsupported``: "the CUDA backend does not support ...");
* type spellings: ``storage`` (how an element is kept in memory), ``compute`` (the type arithmetic
  runs in: f16 and bf16 compute in float, pred in int), ``load``/``store`` between the two;
* ``literal`` (one element as a C literal of compute type) and ``numpy_to_c_array`` (a constant's
  elements in storage type);
* ``round_result``: how an f16/bf16 result is rounded to its type after each operation;
* vector loop annotations: ``reduction_clause`` and ``simd_pragma`` (``None``: the target has none,
  no line is written);
* how helper functions are declared (``inline_function``) and spelled (``popcount64``, ``clz64``),
  for the helpers a backend's prelude defines (``int_helpers.py``).

The helper functions the rules call (``tfxla_maxf``, ``tfxla_div_s32``, ``tfxla_vexpf``, ...) have
the same names in every dialect: each backend's prelude defines them with the same semantics. A
constant's storage is per-module state, not a spelling: the emitter is given a ``constant_ref``.

This base class is the C-family spelling both backends share (C11 with ``_Float16``, no pragmas);
``backends/cpu/dialect.py`` adds OpenMP SIMD pragmas, ``backends/cuda/dialect.py`` spells f16 ``__half`` and
declares helpers ``__device__``.
"""

from __future__ import annotations

import math

import numpy as np

from backends.codegen.errors import CodegenUnsupported
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode

_STORAGE = {
    P.PRED: "uint8_t", P.S8: "int8_t", P.S16: "int16_t", P.S32: "int32_t", P.S64: "int64_t",
    P.U8: "uint8_t", P.U16: "uint16_t", P.U32: "uint32_t", P.U64: "uint64_t",
    P.BF16: "uint16_t", P.F32: "float", P.F64: "double",
}
_COMPUTE = {**_STORAGE, P.F16: "float", P.BF16: "float", P.PRED: "int"}


class Dialect:
    """The C-family spelling of a target (see the module docstring for what each member is for).

    f16 is stored as ``f16`` (``_Float16`` here) and bf16 as ``uint16_t`` (its bit pattern); both
    are computed in float, as XLA:CPU does. pred is stored as ``uint8_t`` (0 or 1)."""

    backend: str = "C"  # named in messages: "the <backend> backend ..."
    f16: str = "_Float16"  # the storage type of f16
    inline_function: str = "static inline"  # how a prelude helper function is declared

    # --- types ---------------------------------------------------------------------------------
    def storage(self, t: P) -> str:
        if t is P.F16:
            return self.f16
        try:
            return _STORAGE[t]
        except KeyError:
            why = f" (complex types are not supported by the {self.backend} backend yet)" if t.is_complex else ""
            raise CodegenUnsupported(f"the {self.backend} backend does not support element type {t.value}{why}") \
                from None

    def compute(self, t: P) -> str:
        self.storage(t)
        return _COMPUTE[t]

    def load(self, t: P, expr: str) -> str:
        """Convert a stored value to its compute type."""
        if t is P.BF16:
            return f"tfxla_bf16_to_f32({expr})"
        if t is P.F16:
            return f"(float)({expr})"
        if t is P.PRED:
            return f"(int)({expr})"
        return expr

    def store(self, t: P, expr: str) -> str:
        """Convert a compute-type value to its storage type."""
        if t is P.BF16:
            return f"tfxla_f32_to_bf16({expr})"
        if t is P.F16:
            return f"({self.f16})({expr})"
        if t is P.PRED:
            return f"(uint8_t)(({expr}) != 0)"
        return expr

    def round_result(self, t: P, expr: str) -> str:
        """``expr`` (compute type) rounded to ``t``: f16/bf16 results are rounded after every
        operation, as XLA:CPU rounds after each f16/bf16 operation it computes in f32."""
        if t is P.BF16:
            return f"tfxla_bf16_to_f32(tfxla_f32_to_bf16({expr}))"
        if t is P.F16:
            return f"(float)({self.f16})({expr})"
        return expr

    # --- literals --------------------------------------------------------------------------------
    def literal(self, value: object, t: P) -> str:
        """A C literal of compute type for one element."""
        return c_literal(value, t)

    def numpy_to_c_array(self, arr: np.ndarray, t: P) -> str:
        """The initializer list of a constant array, in row-major order, in storage type."""
        flat = np.ascontiguousarray(arr).reshape(-1)
        if t is P.BF16:
            return ", ".join(str(int(v)) for v in flat.view(np.uint16))
        if t is P.F16:
            return ", ".join(c_literal(v, P.F32) for v in flat.astype(np.float32))
        return ", ".join(c_literal(v, t) for v in flat)

    # --- loop annotations ------------------------------------------------------------------------
    def reduction_clause(self, op: Opcode, compute: str, acc: str) -> str | None:
        """The clause that lets a loop accumulating ``acc`` with reducer ``op`` be vectorized, or None
        where the target has none for it."""
        return None

    def simd_pragma(self, clause: str) -> str | None:
        """The line before an innermost reduction loop carrying ``clause`` (None: no line)."""
        return None

    # --- helper spellings ------------------------------------------------------------------------
    def popcount64(self, expr: str) -> str:
        """The number of set bits of a ``uint64_t``."""
        return f"__builtin_popcountll({expr})"

    def clz64(self, expr: str) -> str:
        """The number of leading zero bits of a nonzero ``uint64_t``."""
        return f"__builtin_clzll({expr})"


def c_literal(value: object, t: P) -> str:
    """A C literal of compute type for one element (the same text in every C-family dialect)."""
    if t is P.PRED:
        return "1" if bool(value) else "0"
    if t.is_complex:  # C11's CMPLXF/CMPLX (<complex.h>): a constant expression, exact for inf and NaN parts
        part = P.F32 if t is P.C64 else P.F64
        z = complex(value)  # type: ignore[call-overload]
        return f"CMPLX{'F' if t is P.C64 else ''}({c_literal(z.real, part)}, {c_literal(z.imag, part)})"
    if t.is_integral:
        v = int(value)  # type: ignore[call-overload]
        if t is P.S64:
            return f"INT64_C({v})" if v != -(1 << 63) else "INT64_MIN"
        if t is P.U64:
            return f"UINT64_C({v})"
        if t is P.S32 and v == -(1 << 31):
            return "INT32_MIN"
        if t is P.U32:
            return f"{v}u"
        return str(v)
    f = float(value)  # type: ignore[arg-type]
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
