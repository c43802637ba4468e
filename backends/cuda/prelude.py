"""The CUDA C prelude every generated module starts with: includes and ``__device__`` scalar helpers.

It defines, as device functions, every helper name the shared elemental
rules emit (``backends/codegen/elemental_*.py``): ``tfxla_maxf``,
``tfxla_div_s32``, ``tfxla_bf16_to_f32``, ``tfxla_vexpf``, ... with the same
semantics as in ``backends/cpu/prelude.py`` (XLA's integer division by zero,
shifts past the width, saturating float->int conversion, NaN-propagating
max/min). The integer helpers are the shared template
(``backends/codegen/int_helpers.py``) in the CUDA dialect (``__device__``
functions, CUDA intrinsics for bit counts); the float functions map to CUDA's
libdevice (``expf`` is within 2 ulp; no ``--use_fast_math``). It also defines
the warp-shuffle overloads the reduction kernels use.
"""

from __future__ import annotations

from backends.codegen.int_helpers import int_helpers
from backends.cuda.dialect import CUDA

_HEADER = r"""
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>


__device__ __forceinline__ float tfxla_bf16_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
__device__ __forceinline__ uint16_t tfxla_f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (uint16_t)(u >> 16);
}
__device__ __forceinline__ float tfxla_maxf(float x, float y) { return (isnan(x) || x >= y) ? x : y; }
__device__ __forceinline__ float tfxla_minf(float x, float y) { return (isnan(x) || x <= y) ? x : y; }
__device__ __forceinline__ double tfxla_max(double x, double y) { return (isnan(x) || x >= y) ? x : y; }
__device__ __forceinline__ double tfxla_min(double x, double y) { return (isnan(x) || x <= y) ? x : y; }
__device__ __forceinline__ float tfxla_signf(float x) {
  return isnan(x) ? x : (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x));
}
__device__ __forceinline__ double tfxla_sign(double x) {
  return isnan(x) ? x : (x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x));
}
__device__ __forceinline__ double tfxla_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ int32_t tfxla_total_f32(float x) {
  int32_t i = __float_as_int(x); return i < 0 ? (int32_t)(INT32_MIN - (int64_t)i - 1) : i;
}
__device__ __forceinline__ int64_t tfxla_total_f64(double x) {
  int64_t i = __double_as_longlong(x); return i < 0 ? (int64_t)((uint64_t)INT64_MIN - (uint64_t)i - 1u) : i;
}
__device__ __forceinline__ float tfxla_powf(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double tfxla_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float tfxla_remf(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double tfxla_rem(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float tfxla_vexpf(float x) { return expf(x); }
__device__ __forceinline__ float tfxla_vexpm1f(float x) { return expm1f(x); }
__device__ __forceinline__ float tfxla_vlogf(float x) { return logf(x); }
__device__ __forceinline__ float tfxla_vlog1pf(float x) { return log1pf(x); }
__device__ __forceinline__ float tfxla_vtanhf(float x) { return tanhf(x); }
__device__ __forceinline__ float tfxla_verff(float x) { return erff(x); }
__device__ __forceinline__ float tfxla_vlogisticf(float x) {
  const float e = expf(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* Warp shuffles for every compute type (CUDA has no overloads for 8/16-bit integers). */
#define TFXLA_SHFL(T, U) \
  __device__ __forceinline__ T tfxla_shfl_down(T v, int offset) { \
    return (T)__shfl_down_sync(0xffffffffu, (U)v, offset); }
TFXLA_SHFL(float, float)
TFXLA_SHFL(double, double)
TFXLA_SHFL(int8_t, int)
TFXLA_SHFL(int16_t, int)
TFXLA_SHFL(int32_t, int)
TFXLA_SHFL(uint8_t, unsigned int)
TFXLA_SHFL(uint16_t, unsigned int)
TFXLA_SHFL(uint32_t, unsigned int)
TFXLA_SHFL(long, long long)
TFXLA_SHFL(unsigned long, unsigned long long)
TFXLA_SHFL(long long, long long)
TFXLA_SHFL(unsigned long long, unsigned long long)
#undef TFXLA_SHFL
"""


PRELUDE = _HEADER + int_helpers(CUDA)
