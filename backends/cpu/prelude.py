"""The C prelude every generated CPU kernel starts with: includes and scalar helpers.

Helpers give XLA's semantics where C's differ (integer division by zero,
shifts past the bit width, saturating float->int conversion, NaN-propagating
max/min) and convert bf16 by bit pattern. All are ``static inline`` so the C
compiler can inline and vectorize them.
"""

from __future__ import annotations

from backends.cpu.vmath import VMATH_C
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

_HEADER = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#define TFXLA_EXPORT __attribute__((visibility("default")))

#if defined(__SSE__) && defined(_OPENMP)
#include <xmmintrin.h>
/* OpenMP worker threads keep the floating-point mode (MXCSR: flush-to-zero, denormals-are-zero,
   rounding) they were created with, which can differ from the caller's: TensorFlow sets FTZ/DAZ
   while it runs an op (so a team created inside an eager op flushes), plain Python does not. Each
   run makes the calling thread's team (libgomp keeps one per master thread) adopt the caller's mode
   when it changed, so a kernel computes as if on the calling thread alone. */
static __thread unsigned int tfxla_team_csr = 0xffffffffu;
static void tfxla_sync_fp_mode(void) {
  const unsigned int mode = _mm_getcsr() & ~0x3fu; /* without the sticky exception flags */
  if (mode == tfxla_team_csr) return;
  #pragma omp parallel
  {
    const unsigned int mine = _mm_getcsr();
    if ((mine & ~0x3fu) != mode) _mm_setcsr(mode | (mine & 0x3fu));
  }
  tfxla_team_csr = mode;
}
#else
static void tfxla_sync_fp_mode(void) {}
#endif

static inline float tfxla_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t tfxla_f32_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static inline float tfxla_maxf(float x, float y) { return (isnan(x) || x >= y) ? x : y; }
static inline float tfxla_minf(float x, float y) { return (isnan(x) || x <= y) ? x : y; }
static inline double tfxla_max(double x, double y) { return (isnan(x) || x >= y) ? x : y; }
static inline double tfxla_min(double x, double y) { return (isnan(x) || x <= y) ? x : y; }
#pragma omp declare reduction(tfxla_maxf : float : omp_out = tfxla_maxf(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(tfxla_minf : float : omp_out = tfxla_minf(omp_out, omp_in)) initializer(omp_priv = INFINITY)
#pragma omp declare reduction(tfxla_max : double : omp_out = tfxla_max(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(tfxla_min : double : omp_out = tfxla_min(omp_out, omp_in)) initializer(omp_priv = INFINITY)
static inline float tfxla_signf(float x) { return isnan(x) ? x : (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x)); }
static inline double tfxla_sign(double x) { return isnan(x) ? x : (x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x)); }
static inline double tfxla_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline int32_t tfxla_total_f32(float x) {
  int32_t i; memcpy(&i, &x, 4); return i < 0 ? (int32_t)(INT32_MIN - (int64_t)i - 1) ^ 0 : i;
}
static inline int64_t tfxla_total_f64(double x) {
  int64_t i; memcpy(&i, &x, 8); return i < 0 ? (int64_t)((uint64_t)INT64_MIN - (uint64_t)i - 1u) : i;
}
static inline float tfxla_powf(float x, float y) { return powf(x, y); }
static inline double tfxla_pow(double x, double y) { return pow(x, y); }
static inline float tfxla_remf(float x, float y) { return fmodf(x, y); }
static inline double tfxla_rem(double x, double y) { return fmod(x, y); }
"""

_INT_TEMPLATE = r"""
static inline {T} tfxla_div_{N}({T} x, {T} y) {{
  if (y == 0) return ({T})-1;
  {SIGNED_DIV}
  return ({T})(x / y);
}}
static inline {T} tfxla_rem_{N}({T} x, {T} y) {{
  if (y == 0) return x;
  {SIGNED_REM}
  return ({T})(x % y);
}}
static inline {T} tfxla_abs_{N}({T} x) {{ return {ABS}; }}
static inline {T} tfxla_shl_{N}({T} x, {T} y) {{
  return (({U})y >= {BITS}u) ? ({T})0 : ({T})(({U})x << ({U})y);
}}
static inline {T} tfxla_shrl_{N}({T} x, {T} y) {{
  return (({U})y >= {BITS}u) ? ({T})0 : ({T})(({U})x >> ({U})y);
}}
static inline {T} tfxla_shra_{N}({T} x, {T} y) {{
  {SHRA}
}}
static inline {T} tfxla_pow_{N}({T} x, {T} y) {{
  {NEG_POW}
  {U} r = 1, b = ({U})x; {U} e = ({U})y;
  while (e) {{ if (e & 1u) r *= b; b *= b; e >>= 1; }}
  return ({T})r;
}}
static inline {T} tfxla_from_f64_{N}(double x) {{
  if (isnan(x)) return 0;
  if (x <= (double){MIN}) return {MIN};
  if (x >= (double){MAX}) return {MAX};
  return ({T})x;
}}
static inline {T} tfxla_popcnt_{N}({T} x) {{ return ({T})__builtin_popcountll((uint64_t)({U})x); }}
static inline {T} tfxla_clz_{N}({T} x) {{
  return ({T})((({U})x == 0) ? {BITS} : (__builtin_clzll((uint64_t)({U})x) - (64 - {BITS})));
}}
"""


def int_helpers() -> str:
    parts = []
    for t, ct, ut, mn, mx in INT_TYPES:
        signed = t.is_signed_int
        parts.append(_INT_TEMPLATE.format(
            T=ct, U=ut, N=t.value, BITS=t.bit_width, MIN=mn, MAX=mx,
            SIGNED_DIV=f"if (x == {mn} && y == ({ct})-1) return x;" if signed else "",
            SIGNED_REM=f"if (x == {mn} && y == ({ct})-1) return 0;" if signed else "",
            ABS=f"x < 0 ? ({ct})(0u - ({ut})x) : x" if signed else "x",
            SHRA=(f"if (({ut})y >= {t.bit_width}u) return x < 0 ? ({ct})-1 : ({ct})0;\n  return ({ct})(x >> y);"
                  if signed else f"return (({ut})y >= {t.bit_width}u) ? ({ct})0 : ({ct})(x >> y);"),
            NEG_POW=("if (y < 0) return (x == 1) ? 1 : ((x == -1) ? ((y & 1) ? -1 : 1) : 0);"
                     if signed else ""),
        ))
    return "".join(parts)


PRELUDE = _HEADER + int_helpers() + VMATH_C
