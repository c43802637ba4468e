"""Vectorizable float32 exp, expm1, log, log1p, tanh, logistic and erf for generated C kernels, and for
row programs an exp of non-positive arguments (``tfxla_vexpf_nonpos``: softmax's exp(x - max(x))).

``VMATH_C`` is C source (appended to the prelude) defining ``static inline``
functions ``tfxla_vexpf``, ``tfxla_vexpm1f``, ``tfxla_vlogf``, ``tfxla_vlog1pf``,
``tfxla_vtanhf``, ``tfxla_vlogisticf`` and ``tfxla_verff``. They use only float
arithmetic, integer bit manipulation (through ``memcpy``) and selects: no
libm calls and no branches, so ``gcc -O3 -march=native`` vectorizes loops
calling them (with AVX-512 at ``-mprefer-vector-width=512``; gcc's default for
these targets is 256-bit ymm). They need no ``-ffast-math`` and must not be
built with it (reassociation breaks the exact Fast2Sum steps); they assume
round-to-nearest; subnormal inputs and results follow IEEE (no FTZ).
With FMA (``__FMA__``) the polynomials use ``fmaf``; without it, plain
multiply-add (``-std=c11`` keeps gcc from contracting), slightly less accurate.

Accuracy, measured exhaustively (all 2^32 float32 inputs) against float64
NumPy (SciPy's erf) rounded to float32: the max distance, in float32 steps,
from the correctly rounded result, and the share of results that are not
correctly rounded; FMA build (``-march=native``) / baseline x86-64 build:

    tfxla_vexpf       1 ulp (0.40%)  / 1 ulp (0.42%)   overflow to inf, gradual underflow to 0
    tfxla_vexpm1f     1 ulp (0.20%)  / 1 ulp (0.20%)
    tfxla_vlogf       1 ulp (0.28%)  / 1 ulp (0.29%)   subnormal inputs included
    tfxla_vlog1pf     1 ulp (0.39%)  / 1 ulp (0.40%)
    tfxla_vtanhf      1 ulp (0.17%)  / 1 ulp (0.17%)
    tfxla_vlogisticf  2 ulp (2.9%)   / 2 ulp (2.9%)    accurate down to the subnormal range
    tfxla_verff       1 ulp (0.38%)  / 2 ulp (17%)

``tests/test_vmath.py`` asserts these bounds on a 1e6-point sweep per function
and build (every binade, thresholds, special values).

Special values are exact as in IEEE/glibc: exp(-inf)=0, exp(inf)=inf,
expm1(-inf)=-1, log(0)=-inf, log(x<0)=NaN, log1p(-1)=-inf, log1p(x<-1)=NaN,
tanh(+-inf)=+-1, erf(+-inf)=+-1, logistic(-inf)=0, logistic(inf)=1; NaN in
gives NaN out; +-0 (and tiny inputs) keep their sign in expm1, log1p, tanh, erf.

``tfxla_vexpf_nonpos`` is ``tfxla_vexpf`` for x <= 0 or NaN only (a row program's exp(x - max(x))),
bit-equal to it on all 2^31 such inputs (both builds) with 7 vector instructions fewer
(``tests/test_vmath_rows.py`` checks a sweep of them).

Method: exp/expm1 reduce x = n ln2 + r (|r| <= ln2/2, Cody-Waite two-part ln2,
n from the 1.5*2^23 rounding trick, so no float->int conversion) and evaluate
expm1(r) = r + r^2 P(r); exp scales by 2^n in two steps so overflow and
subnormal results round once; expm1 = 2 (s r + (s - 1/2) + s r^2 P(r)) with
s = 2^(n-1), the first two terms summed exactly (Fast2Sum) so that the
cancellation at n = +-1 costs nothing. log/log1p split the argument into
2^e m with m in [sqrt(1/2), sqrt(2)) by bit arithmetic and evaluate
log1p(f) = f - f^2/2 + f^3 P(f) with f = m - 1 exact; log1p adds d / (1 + f)
where d is the rounding error of 1 + x (Fast2Sum) scaled by 2^-e. tanh is
x + x^3 P(x^2) below 0.625 and 1 - 2 / (e^(2|x|) + 1) above. logistic is
e / (1 + e) or 1 / (1 + e) with e = e^-|x|. erf is x (2/sqrt(pi) + x^2 P(x^2))
below 1 (2/sqrt(pi) as a float pair) and 1 - e^(-x^2) R(|x| - 2.5) above,
saturating at 4. Polynomial coefficients are weighted minimax fits
(``bench/vmath_fit.py`` regenerates them) rounded to float32.

Speed (``bench/vmath_bench.py``, one thread, in cache): 0.26-0.45 ns per
element with 512-bit vectors, 0.38-0.63 ns with gcc's default 256-bit; glibc's
scalar expf/logf take ~2 ns, tanhf/erff/expm1f/log1pf 9-14 ns.
"""

from __future__ import annotations

VMATH_FUNCTIONS: dict[str, str] = {
    "exp": "tfxla_vexpf",
    "expm1": "tfxla_vexpm1f",
    "log": "tfxla_vlogf",
    "log1p": "tfxla_vlog1pf",
    "tanh": "tfxla_vtanhf",
    "logistic": "tfxla_vlogisticf",
    "erf": "tfxla_verff",
}
"""Name of each function -> its C name in ``VMATH_C``."""

VMATH_C = r"""
/* ---- vectorizable float32 math (backends/cpu/vmath.py) ---- */
#if defined(__FMA__) || defined(__aarch64__)
#define TFXLA_VM_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define TFXLA_VM_FMA(a, b, c) ((a) * (b) + (c))
#endif
static inline uint32_t tfxla_vm_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float tfxla_vm_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
/* c ? a : b as a bit blend. A plain ?: on floats is often left as a branch (gcc sinks a value
   used under one condition into it, or will not if-convert a trapping compare), which blocks
   vectorization; the blend always is straight-line code. */
static inline float tfxla_vm_select(int c, float a, float b) {
  uint32_t m = 0u - (uint32_t)(c != 0);
  return tfxla_vm_float((tfxla_vm_bits(a) & m) | (tfxla_vm_bits(b) & ~m));
}
static inline float tfxla_vm_copysign(float mag, float sgn) {
  return tfxla_vm_float((tfxla_vm_bits(mag) & 0x7fffffffu) | (tfxla_vm_bits(sgn) & 0x80000000u));
}
/* 2^k for k in [-126, 127] */
static inline float tfxla_vm_pow2i(int32_t k) { return tfxla_vm_float((uint32_t)(k + 127) << 23); }

/* x = n ln2 + r with |r| <= ln2/2 (plus rounding); returns r, sets *n. |x| < 2^21. */
static inline float tfxla_vm_exp_reduce(float x, int32_t *n) {
  const float shift = 0x1.8p23f;
  float t = TFXLA_VM_FMA(x, 0x1.715476p+0f, shift);  /* round(x / ln2) in the low bits */
  float fn = t - shift;
  *n = (int32_t)(tfxla_vm_bits(t) - tfxla_vm_bits(shift));
  float r = TFXLA_VM_FMA(fn, -0x1.62e4p-1f, x);      /* exact: ln2 high part has 16 bits */
  return TFXLA_VM_FMA(fn, -0x1.7f7d1cp-20f, r);      /* ln2 low part */
}
/* q(r) with expm1(r) = r + r^2 q(r) for |r| <= 0.35, relative error 0.23 ulp */
static inline float tfxla_vm_expm1_q(float r) {
  float p = 0x1.6beb22p-10f;
  p = TFXLA_VM_FMA(p, r, 0x1.122cecp-7f);
  p = TFXLA_VM_FMA(p, r, 0x1.55567ep-5f);
  p = TFXLA_VM_FMA(p, r, 0x1.5554aap-3f);
  return TFXLA_VM_FMA(p, r, 0x1.fffffep-2f);
}
static inline float tfxla_vm_expm1_poly(float r) { return TFXLA_VM_FMA(r * r, tfxla_vm_expm1_q(r), r); }
/* e^x for x in [-87, 87] (no overflow, no subnormal result); NaN propagates */
static inline float tfxla_vm_exp_inrange(float x) {
  int32_t n;
  float r = tfxla_vm_exp_reduce(x, &n);
  return (1.0f + tfxla_vm_expm1_poly(r)) * tfxla_vm_pow2i(n);
}
static inline float tfxla_vexpf(float x) {
  float xc = tfxla_vm_select(x < -104.0f, -104.0f, x);  /* comparisons with NaN are false: NaN passes */
  xc = tfxla_vm_select(xc > 89.0f, 89.0f, xc);
  int32_t n;
  float r = tfxla_vm_exp_reduce(xc, &n);
  float p = 1.0f + tfxla_vm_expm1_poly(r);
  int32_t n1 = n >> 1;  /* 2^n in two exact factors: p * 2^n1 is exact, the last product rounds once */
  return (p * tfxla_vm_pow2i(n1)) * tfxla_vm_pow2i(n - n1);
}
/* tfxla_vexpf for x <= 0 or NaN only (exp(x - max(x)) over a row: softmax, log softmax): no upper clamp,
   and n <= 0 scales in one exact step and one rounding multiply (2^(n+25) is normal): bit-equal to
   tfxla_vexpf on every such input (checked exhaustively), 22 vector instructions a loop instead of 29. */
static inline float tfxla_vexpf_nonpos(float x) {
  float xc = tfxla_vm_select(x < -104.0f, -104.0f, x);
  int32_t n;
  float r = tfxla_vm_exp_reduce(xc, &n);
  float p = 1.0f + tfxla_vm_expm1_poly(r);
  return (p * tfxla_vm_pow2i(n + 25)) * 0x1p-25f;
}
static inline float tfxla_vexpm1f(float x) {
  float xc = tfxla_vm_select(x < -30.0f, -30.0f, x);
  xc = tfxla_vm_select(xc > 89.0f, 89.0f, xc);
  const float shift = 0x1.8p23f;  /* the reduction of tfxla_vm_exp_reduce, keeping r = rh + rl */
  float t = TFXLA_VM_FMA(xc, 0x1.715476p+0f, shift);
  float fn = t - shift;
  int32_t n = (int32_t)(tfxla_vm_bits(t) - tfxla_vm_bits(shift));
  float rh = TFXLA_VM_FMA(fn, -0x1.62e4p-1f, xc);  /* exact */
  float rl = fn * -0x1.7f7d1cp-20f;
  float r = rh + rl;
  float tail = (r * r) * tfxla_vm_expm1_q(r);  /* expm1(r) - r */
  /* expm1(x) = 2^n expm1(r) + 2^n - 1 = 2 (s rh + (s - 1/2) + s (rl + tail)) with s = 2^(n-1) (no overflow
     at n = 128); s rh + (s - 1/2) is summed exactly (Fast2Sum: |s - 1/2| >= |s rh|) so that the cancellation
     for n = +-1 does not amplify a rounding error */
  float s = tfxla_vm_pow2i(n - 1);
  float a = s - 0.5f, b = s * rh;
  float hi = a + b;
  float lo = (a - hi) + b;
  float y = 2.0f * (hi + TFXLA_VM_FMA(s, rl + tail, lo));
  return tfxla_vm_select(fabsf(x) < 0x1p-25f, x, y);  /* expm1(x) rounds to x; keeps -0 and subnormals */
}

/* q(f) with log1p(f) = f + f^2 q(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1], relative error 0.1 ulp */
static inline float tfxla_vm_log1p_q(float f) {
  float p = -0x1.392f10p-4f;
  p = TFXLA_VM_FMA(p, f, 0x1.05b738p-3f);
  p = TFXLA_VM_FMA(p, f, -0x1.0d9a36p-3f);
  p = TFXLA_VM_FMA(p, f, 0x1.22cf52p-3f);
  p = TFXLA_VM_FMA(p, f, -0x1.546f2ap-3f);
  p = TFXLA_VM_FMA(p, f, 0x1.99a060p-3f);
  p = TFXLA_VM_FMA(p, f, -0x1.000232p-2f);
  p = TFXLA_VM_FMA(p, f, 0x1.555554p-2f);
  return TFXLA_VM_FMA(f, p, -0.5f);  /* log1p(f) = f - f^2/2 + f^3 P(f) */
}
/* e ln2 + y with ln2 in two parts (e ln2_hi is exact for |e| < 256) */
static inline float tfxla_vm_add_eln2(int32_t e, float y) {
  float fe = (float)e;
  return TFXLA_VM_FMA(fe, 0x1.62e4p-1f, TFXLA_VM_FMA(fe, 0x1.7f7d1cp-20f, y));
}
/* bits of a positive normal float -> exponent e with x = 2^e m, m in [sqrt(1/2), sqrt(2)) */
static inline int32_t tfxla_vm_log_split(uint32_t u, float *m) {
  uint32_t k = u - 0x3f3504f3u;
  *m = tfxla_vm_float((k & 0x007fffffu) + 0x3f3504f3u);
  return (int32_t)k >> 23;
}
static inline float tfxla_vlogf(float x) {
  int sub = x < 0x1p-126f;  /* subnormal (or zero, negative): scale up by 2^23 first */
  float xs = x * tfxla_vm_select(sub, 0x1p23f, 1.0f);
  float m;
  int32_t e = tfxla_vm_log_split(tfxla_vm_bits(xs), &m) - (23 & -sub);
  float f = m - 1.0f;
  float y = tfxla_vm_add_eln2(e, TFXLA_VM_FMA(f * f, tfxla_vm_log1p_q(f), f));
  y = tfxla_vm_select(x < 0.0f, NAN, y);
  y = tfxla_vm_select(x == 0.0f, -INFINITY, y);
  return tfxla_vm_select((x == INFINITY) | (x != x), x, y);  /* +inf, NaN */
}
static inline float tfxla_vlog1pf(float x) {
  float u = 1.0f + x;
  int big = fabsf(x) > 1.0f;
  float a = tfxla_vm_select(big, x, 1.0f), b = tfxla_vm_select(big, 1.0f, x);
  float c = (a - u) + b;  /* Fast2Sum: 1 + x = u + c exactly */
  float m;
  int32_t e = tfxla_vm_log_split(tfxla_vm_bits(u), &m);
  /* 1 + x = 2^e (m + d): log1p(x) = e ln2 + log1p(f) + d / (1 + f) + O(d^2), f = m - 1 exact */
  float f = m - 1.0f;
  float d = c * tfxla_vm_pow2i(-(e < 126 ? e : 126));
  float corr = d * TFXLA_VM_FMA(f, f, 1.0f - f);  /* 1/(1+f) to 7%: d is below an ulp of f */
  float y = tfxla_vm_add_eln2(e, TFXLA_VM_FMA(f * f, tfxla_vm_log1p_q(f), corr) + f);
  y = tfxla_vm_select(x < -1.0f, NAN, y);
  y = tfxla_vm_select(x == -1.0f, -INFINITY, y);
  /* log1p(x) rounds to x below 2^-24; NaN propagates through y */
  return tfxla_vm_select((fabsf(x) < 0x1p-24f) | (x == INFINITY), x, y);
}

static inline float tfxla_vtanhf(float x) {
  float ax = fabsf(x);
  float x2 = x * x;
  float p = -0x1.75e1fep-8f;  /* tanh(x) = x + x^3 P(x^2) on [0, 0.625], 0.07 ulp */
  p = TFXLA_VM_FMA(p, x2, 0x1.5226a6p-6f);
  p = TFXLA_VM_FMA(p, x2, -0x1.b83c5cp-5f);
  p = TFXLA_VM_FMA(p, x2, 0x1.110726p-3f);
  p = TFXLA_VM_FMA(p, x2, -0x1.555532p-2f);
  float small = TFXLA_VM_FMA(ax * x2, p, ax);
  float ac = tfxla_vm_select(ax > 9.5f, 9.5f, ax);  /* tanh rounds to 1 above 9.01 */
  float big = 1.0f - 2.0f / (tfxla_vm_exp_inrange(2.0f * ac) + 1.0f);
  return tfxla_vm_copysign(tfxla_vm_select(ax < 0.625f, small, big), x);  /* odd; keeps -0 */
}
static inline float tfxla_vlogisticf(float x) {
  float e = tfxla_vexpf(-fabsf(x));  /* in [0, 1]: no 1/(1+inf), accurate into the subnormals */
  return tfxla_vm_select(x >= 0.0f, 1.0f, e) / (1.0f + e);
}
static inline float tfxla_verff(float x) {
  float ax = fabsf(x);
  float x2 = x * x;
  float p = 0x1.4b4b92p-14f;  /* erf(x) = x (2/sqrt(pi) + x^2 P(x^2)) on [0, 1], 0.02 ulp */
  p = TFXLA_VM_FMA(p, x2, -0x1.a4bb4ap-11f);
  p = TFXLA_VM_FMA(p, x2, 0x1.54247ap-8f);
  p = TFXLA_VM_FMA(p, x2, -0x1.b7fdaep-6f);
  p = TFXLA_VM_FMA(p, x2, 0x1.ce2d4ep-4f);
  p = TFXLA_VM_FMA(p, x2, -0x1.812740p-2f);
  p = TFXLA_VM_FMA(p, x2, -0x1.f7ac92p-25f);  /* low part of 2/sqrt(pi) */
  float small = TFXLA_VM_FMA(ax, 0x1.20dd76p+0f, ax * p);
  float ac = tfxla_vm_select(ax > 4.0f, 4.0f, ax);  /* erf rounds to 1 above 3.92 */
  ac = tfxla_vm_select(ac < 1.0f, 1.0f, ac);
  float t = ac - 2.5f;  /* erfc(x) = e^(-x^2) R(x - 2.5) on [1, 4], 0.04 ulp of erf */
  float q = 0x1.c0244ep-14f;
  q = TFXLA_VM_FMA(q, t, 0x1.d8037ap-13f);
  q = TFXLA_VM_FMA(q, t, 0x1.1cddd2p-11f);
  q = TFXLA_VM_FMA(q, t, -0x1.5a9c5cp-11f);
  q = TFXLA_VM_FMA(q, t, 0x1.2dcb12p-9f);
  q = TFXLA_VM_FMA(q, t, -0x1.0a7a58p-7f);
  q = TFXLA_VM_FMA(q, t, 0x1.983380p-6f);
  q = TFXLA_VM_FMA(q, t, -0x1.30816ep-4f);
  q = TFXLA_VM_FMA(q, t, 0x1.afbbe6p-3f);
  float big = TFXLA_VM_FMA(-tfxla_vm_exp_inrange(-(ac * ac)), q, 1.0f);
  return tfxla_vm_copysign(tfxla_vm_select(ax < 1.0f, small, big), x);  /* odd; keeps -0 */
}
"""
