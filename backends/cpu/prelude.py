"""The C prelude every generated CPU kernel starts with: includes, the caller's runtime (kernel ABI 2:
``tfxla_runtime``, and ``tfxla_parallel`` running a parallel loop's tasks on it, ``parallel.py``) and
scalar helpers.

Helpers give XLA's semantics where C's differ (integer division by zero,
shifts past the bit width, saturating float->int conversion, NaN-propagating
max/min) and convert bf16 by bit pattern. All are ``static inline`` so the C
compiler can inline and vectorize them. The integer helpers are the shared
template (``backends/codegen/int_helpers.py``) in the C dialect.
"""

from __future__ import annotations

from backends.codegen.abi import RUNTIME_C
from backends.codegen.int_helpers import int_helpers
from backends.cpu.dialect import C
from backends.cpu.parallel import PARALLEL_C
from backends.cpu.vmath import VMATH_C

_HEADER = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#define TFXLA_EXPORT __attribute__((visibility("default")))

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

PRELUDE = _HEADER + RUNTIME_C + PARALLEL_C + int_helpers(C) + VMATH_C
