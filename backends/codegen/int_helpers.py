"""The integer helpers of every backend's prelude: XLA's semantics where C's differ.

One function per (operation, integer type), named ``tfxla_<op>_<type>`` (``tfxla_div_s32``,
``tfxla_shl_u8``, ...), which the elemental rules call: division and remainder by zero (and
``INT_MIN / -1``) give XLA's answers instead of trapping, shifts past the bit width give 0 (or the
sign), float->int conversion saturates and maps NaN to 0, ``pow`` by squaring. The text is the same
for every C-family target; the dialect says how a helper is declared (``static inline``, or
``__device__ __forceinline__``) and how bit counts are spelled (GCC builtins or CUDA intrinsics).
"""

from __future__ import annotations

from backends.codegen.dialect import Dialect
from hlo.dtypes import PrimitiveType as P

# (hlo type, C type, unsigned C type, min, max)
INT_TYPES = [
    (P.S8, "int8_t", "uint8_t", "INT8_MIN", "INT8_MAX"),
    (P.S16, "int16_t", "uint16_t", "INT16_MIN", "INT16_MAX"),
    (P.S32, "int32_t", "uint32_t", "INT32_MIN", "INT32_MAX"),
    (P.S64, "int64_t", "uint64_t", "INT64_MIN", "INT64_MAX"),
    (P.U8, "uint8_t", "uint8_t", "0", "UINT8_MAX"),
    (P.U16, "uint16_t", "uint16_t", "0", "UINT16_MAX"),
    (P.U32, "uint32_t", "uint32_t", "0", "UINT32_MAX"),
    (P.U64, "uint64_t", "uint64_t", "0", "UINT64_MAX"),
]

_INT_TEMPLATE = r"""
{FN} {T} tfxla_div_{N}({T} x, {T} y) {{
  if (y == 0) return ({T})-1;
  {SIGNED_DIV}
  return ({T})(x / y);
}}
{FN} {T} tfxla_rem_{N}({T} x, {T} y) {{
  if (y == 0) return x;
  {SIGNED_REM}
  return ({T})(x % y);
}}
{FN} {T} tfxla_abs_{N}({T} x) {{ return {ABS}; }}
{FN} {T} tfxla_shl_{N}({T} x, {T} y) {{
  return (({U})y >= {BITS}u) ? ({T})0 : ({T})(({U})x << ({U})y);
}}
{FN} {T} tfxla_shrl_{N}({T} x, {T} y) {{
  return (({U})y >= {BITS}u) ? ({T})0 : ({T})(({U})x >> ({U})y);
}}
{FN} {T} tfxla_shra_{N}({T} x, {T} y) {{
  {SHRA}
}}
{FN} {T} tfxla_pow_{N}({T} x, {T} y) {{
  {NEG_POW}
  {U} r = 1, b = ({U})x; {U} e = ({U})y;
  while (e) {{ if (e & 1u) r *= b; b *= b; e >>= 1; }}
  return ({T})r;
}}
{FN} {T} tfxla_from_f64_{N}(double x) {{
  if (isnan(x)) return 0;
  if (x <= (double){MIN}) return {MIN};
  if (x >= (double){MAX}) return {MAX};
  return ({T})x;
}}
{FN} {T} tfxla_popcnt_{N}({T} x) {{ return ({T}){POPCNT}; }}
{FN} {T} tfxla_clz_{N}({T} x) {{
  return ({T})((({U})x == 0) ? {BITS} : ({CLZ} - (64 - {BITS})));
}}
"""


def int_helpers(dialect: Dialect) -> str:
    """The integer helpers for every integer type, in ``dialect``'s spelling."""
    parts = []
    for t, ct, ut, mn, mx in INT_TYPES:
        signed = t.is_signed_int
        parts.append(_INT_TEMPLATE.format(
            FN=dialect.inline_function, T=ct, U=ut, N=t.value, BITS=t.bit_width, MIN=mn, MAX=mx,
            POPCNT=dialect.popcount64(f"(uint64_t)({ut})x"), CLZ=dialect.clz64(f"(uint64_t)({ut})x"),
            SIGNED_DIV=f"if (x == {mn} && y == ({ct})-1) return x;" if signed else "",
            SIGNED_REM=f"if (x == {mn} && y == ({ct})-1) return 0;" if signed else "",
            ABS=f"x < 0 ? ({ct})(0u - ({ut})x) : x" if signed else "x",
            SHRA=(f"if (({ut})y >= {t.bit_width}u) return x < 0 ? ({ct})-1 : ({ct})0;\n  return ({ct})(x >> y);"
                  if signed else f"return (({ut})y >= {t.bit_width}u) ? ({ct})0 : ({ct})(x >> y);"),
            NEG_POW=("if (y < 0) return (x == 1) ? 1 : ((x == -1) ? ((y & 1) ? -1 : 1) : 0);"
                     if signed else ""),
        ))
    return "".join(parts)
