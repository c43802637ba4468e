"""The C FFT library a CPU kernel with an ``fft`` carries: plans, 1-D transforms, the per-axis drivers.

Generated code of our own (no FFT library on the package index is both permissively licensed and a C
header a kernel can include; FFTW is GPL), written once per precision from ``_TEMPLATE`` (``FT`` the
real type, ``CT`` the complex type, ``SFX`` the name suffix ``f``/``d``):

* a 1-D plan of length ``n`` factors ``n`` into radix 4, 2, 3, 5 and other primes and holds its
  twiddles ``exp(-2 pi i k / n)`` (computed in double, rounded once); a recursive mixed-radix
  Cooley-Tukey (decimation in time, out of place) runs it with radix-2/3/4/5 butterflies and a generic
  one for other primes. A length with a prime factor above ``BLUESTEIN_PRIME`` runs Bluestein's
  algorithm instead: a chirp times a convolution done with power-of-two FFTs of length
  ``m >= 2n - 1`` (the chirp's angles come from ``k^2 mod 2n`` in integers, so they stay exact).
* the inverse is ``conj(fft(conj(x)))``; the drivers scale by ``1/n`` per axis (XLA's IFFT is
  normalized).
* drivers: ``tfxla_fft_axis`` transforms every line of one axis of a complex array in place (lines of
  the last axis in place, others gathered into a row); ``tfxla_rfft_last`` the rows of a real array into
  their ``n/2 + 1`` non-negative frequencies; ``tfxla_irfft_last`` the Hermitian halves back to real
  rows (the imaginary parts of the zero and Nyquist terms are ignored, as by XLA and NumPy).
  Each runs its lines as tasks on the caller's threads (``tfxla_parallel``), with row and work buffers
  per task; a task that cannot allocate them sets ``failed``.

Plans are built by ``tfxla_init`` (the state holds a pointer to each: the state's struct is declared
before this library) and only read afterwards, so concurrent calls share them.
"""

from __future__ import annotations

BLUESTEIN_PRIME = 32  # lengths with a larger prime factor run Bluestein's algorithm


def largest_prime_factor(n: int) -> int:
    best, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            best, n = p, n // p
        p += 1
    return max(best, n) if n > 1 else best


def uses_bluestein(n: int) -> bool:
    return largest_prime_factor(n) > BLUESTEIN_PRIME


def work_elements(n: int) -> int:
    """Complex elements of work memory one 1-D transform of length ``n`` needs (besides its row)."""
    if not uses_bluestein(n):
        return n
    m = 1
    while m < 2 * n - 1:
        m *= 2
    return 2 * m


_COMMON = r"""
#define BLUESTEIN_PRIME BLUESTEIN_LIMIT
#define TFXLA_PI 3.14159265358979323846  /* M_PI is not in strict C11 */
#define TFXLA_LINE_BLOCK 8  /* strided lines gathered at once (a cache line of c64 holds 8) */
static int64_t tfxla_fft_largest_prime(int64_t n) {
  int64_t best = 1;
  for (int64_t q = 2; q * q <= n; ++q) while (n % q == 0) { best = q; n /= q; }
  return n > 1 && n > best ? n : best;
}

"""

_TEMPLATE = r"""
typedef struct tfxla_fft_plan_SFX {
  int64_t n, m;          /* length; Bluestein's power-of-two length (0: direct) */
  int fact[128];         /* (radix, remaining length) pairs, ending with remaining length 1 */
  CT* tw;                /* n twiddles exp(-2 pi i k / n) */
  CT* chirp;             /* Bluestein: exp(-pi i k^2 / n), k < n */
  CT* bfft;              /* Bluestein: FFT_m of the conjugate chirp, divided by m */
  struct tfxla_fft_plan_SFX* sub;  /* Bluestein: the plan of length m */
  CT* rtw;               /* a real plan of even n: exp(-2 pi i k / n), k < n/2 */
  struct tfxla_fft_plan_SFX* half;  /* a real plan of even n: the complex plan of length n/2 */
} tfxla_fft_plan_SFX;

static void tfxla_fft_plan_free_SFX(tfxla_fft_plan_SFX* p) {
  if (!p) return;
  free(p->tw); free(p->chirp); free(p->bfft); free(p->rtw);
  if (p->sub) { tfxla_fft_plan_free_SFX(p->sub); free(p->sub); }
  if (p->half) { tfxla_fft_plan_free_SFX(p->half); free(p->half); }
  memset(p, 0, sizeof(*p));
}

static void tfxla_fft_rec_SFX(CT* out, const CT* in, int64_t fstride, const int* fact, const CT* tw);

static void tfxla_fft_direct_SFX(const tfxla_fft_plan_SFX* p, CT* out, const CT* in) {
  if (p->n == 1) { out[0] = in[0]; return; }
  tfxla_fft_rec_SFX(out, in, 1, p->fact, p->tw);
}

/* 0 on success, 1 when out of memory (p is then all zeros). */
static int tfxla_fft_plan_init_SFX(tfxla_fft_plan_SFX* p, int64_t n) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  if (n < 1) return 0;
  if (tfxla_fft_largest_prime(n) > BLUESTEIN_PRIME) {
    int64_t m = 1;
    while (m < 2 * n - 1) m *= 2;
    p->m = m;
    p->sub = (tfxla_fft_plan_SFX*)calloc(1, sizeof(tfxla_fft_plan_SFX));
    p->chirp = (CT*)malloc(sizeof(CT) * n);
    p->bfft = (CT*)malloc(sizeof(CT) * m);
    CT* b = (CT*)calloc(m, sizeof(CT));
    int bad = !p->sub || !p->chirp || !p->bfft || !b || tfxla_fft_plan_init_SFX(p->sub, m);
    if (!bad) {
      for (int64_t k = 0; k < n; ++k) {
        const double a = TFXLA_PI * (double)((k * k) % (2 * n)) / (double)n;
        p->chirp[k] = CMPLX_(cos(a), -sin(a));
        b[k] = conj(p->chirp[k]);
        if (k) b[m - k] = b[k];
      }
      tfxla_fft_direct_SFX(p->sub, p->bfft, b);
      for (int64_t k = 0; k < m; ++k) p->bfft[k] /= (FT)m;
    }
    free(b);
    if (bad) { tfxla_fft_plan_free_SFX(p); return 1; }
    return 0;
  }
  p->tw = (CT*)malloc(sizeof(CT) * n);
  if (!p->tw) return 1;
  for (int64_t k = 0; k < n; ++k) {
    const double a = -2.0 * TFXLA_PI * (double)k / (double)n;
    p->tw[k] = CMPLX_(cos(a), sin(a));
  }
  int nf = 0;
  int64_t rest = n, q = 4;
  while (rest > 1) {
    while (rest % q) {
      q = q == 4 ? 2 : q == 2 ? 3 : q + 2;
      if (q * q > rest) q = rest;
    }
    rest /= q;
    p->fact[nf++] = (int)q;
    p->fact[nf++] = (int)rest;
  }
  return 0;
}

static void tfxla_fft_bfly2_SFX(CT* f, int64_t fs, const CT* tw, int64_t m) {
  for (int64_t k = 0; k < m; ++k) {
    const CT t = CMUL(f[m + k], tw[k * fs]);
    f[m + k] = f[k] - t;
    f[k] += t;
  }
}

static void tfxla_fft_bfly3_SFX(CT* f, int64_t fs, const CT* tw, int64_t m) {
  const FT s = (FT)-0.86602540378443864676;  /* imag(exp(-2 pi i / 3)) */
  for (int64_t k = 0; k < m; ++k) {
    const CT a = CMUL(f[m + k], tw[k * fs]), b = CMUL(f[2 * m + k], tw[2 * k * fs]);
    const CT sum = a + b, dif = (a - b) * s;
    const CT mid = f[k] - sum * (FT)0.5;
    f[k] += sum;
    f[m + k] = mid + MULI(dif);
    f[2 * m + k] = mid - MULI(dif);
  }
}

static void tfxla_fft_bfly4_SFX(CT* f, int64_t fs, const CT* tw, int64_t m) {
  for (int64_t k = 0; k < m; ++k) {
    const CT s0 = CMUL(f[m + k], tw[k * fs]), s1 = CMUL(f[2 * m + k], tw[2 * k * fs]);
    const CT s2 = CMUL(f[3 * m + k], tw[3 * k * fs]);
    const CT s5 = f[k] - s1, s4 = s0 - s2, s3 = s0 + s2;
    const CT f0 = f[k] + s1;
    f[2 * m + k] = f0 - s3;
    f[k] = f0 + s3;
    f[m + k] = s5 - MULI(s4);
    f[3 * m + k] = s5 + MULI(s4);
  }
}

static void tfxla_fft_bfly5_SFX(CT* f, int64_t fs, const CT* tw, int64_t m) {
  const FT ar = (FT)0.30901699437494742410, ai = (FT)-0.95105651629515357212;  /* exp(-2 pi i / 5) */
  const FT br = (FT)-0.80901699437494742410, bi = (FT)-0.58778525229247312917;  /* exp(-4 pi i / 5) */
  for (int64_t k = 0; k < m; ++k) {
    const CT s0 = f[k], s1 = CMUL(f[m + k], tw[k * fs]), s2 = CMUL(f[2 * m + k], tw[2 * k * fs]);
    const CT s3 = CMUL(f[3 * m + k], tw[3 * k * fs]), s4 = CMUL(f[4 * m + k], tw[4 * k * fs]);
    const CT s7 = s1 + s4, s10 = s1 - s4, s8 = s2 + s3, s9 = s2 - s3;
    const CT s5 = s0 + s7 * ar + s8 * br, s6 = MULI(s10 * ai + s9 * bi);
    const CT s11 = s0 + s7 * br + s8 * ar, s12 = MULI(s10 * bi - s9 * ai);
    f[k] = s0 + s7 + s8;
    f[m + k] = s5 + s6;
    f[4 * m + k] = s5 - s6;
    f[2 * m + k] = s11 + s12;
    f[3 * m + k] = s11 - s12;
  }
}

static void tfxla_fft_bfly_generic_SFX(CT* f, int64_t fs, const CT* tw, int64_t m, int p, int64_t n) {
  CT scratch[BLUESTEIN_PRIME + 1];
  for (int64_t u = 0; u < m; ++u) {
    for (int q = 0; q < p; ++q) scratch[q] = f[u + q * m];
    for (int q1 = 0; q1 < p; ++q1) {
      const int64_t k = u + q1 * m;
      CT acc = scratch[0];
      int64_t idx = 0;
      for (int q = 1; q < p; ++q) {
        idx += fs * k;  /* fs * k < n */
        if (idx >= n) idx -= n;
        acc += CMUL(scratch[q], tw[idx]);
      }
      f[k] = acc;
    }
  }
}

/* out[0..n) = DFT of in[0], in[fstride], ... (n elements); fact: this level's (radix, n / radix) first. */
static void tfxla_fft_rec_SFX(CT* out, const CT* in, int64_t fstride, const int* fact, const CT* tw) {
  const int p = fact[0];
  const int64_t m = fact[1];
  const int64_t total = fstride * p * m;  /* the plan's length: twiddles are exp(-2 pi i k / total) */
  if (m == 1) {
    for (int q = 0; q < p; ++q) out[q] = in[q * fstride];
  } else {
    for (int q = 0; q < p; ++q) tfxla_fft_rec_SFX(out + q * m, in + q * fstride, fstride * p, fact + 2, tw);
  }
  switch (p) {
    case 2: tfxla_fft_bfly2_SFX(out, fstride, tw, m); break;
    case 3: tfxla_fft_bfly3_SFX(out, fstride, tw, m); break;
    case 4: tfxla_fft_bfly4_SFX(out, fstride, tw, m); break;
    case 5: tfxla_fft_bfly5_SFX(out, fstride, tw, m); break;
    default: tfxla_fft_bfly_generic_SFX(out, fstride, tw, m, p, total); break;
  }
}

/* x = DFT(x) (inverse: unnormalized inverse DFT); work: tfxla_fft_work(n) elements. */
static void tfxla_fft_exec_SFX(const tfxla_fft_plan_SFX* p, CT* x, CT* work, int inverse) {
  const int64_t n = p->n;
  if (inverse) for (int64_t k = 0; k < n; ++k) x[k] = conj(x[k]);
  if (!p->m) {
    tfxla_fft_direct_SFX(p, work, x);
    memcpy(x, work, sizeof(CT) * n);
  } else {
    const int64_t m = p->m;
    CT* a = work;
    CT* t = work + m;
    for (int64_t k = 0; k < n; ++k) a[k] = CMUL(x[k], p->chirp[k]);
    for (int64_t k = n; k < m; ++k) a[k] = 0;
    tfxla_fft_direct_SFX(p->sub, t, a);
    for (int64_t k = 0; k < m; ++k) t[k] = conj(CMUL(t[k], p->bfft[k]));
    tfxla_fft_direct_SFX(p->sub, a, t);  /* conj(a) = the circular convolution */
    for (int64_t k = 0; k < n; ++k) x[k] = CMUL(conj(a[k]), p->chirp[k]);
  }
  if (inverse) for (int64_t k = 0; k < n; ++k) x[k] = conj(x[k]);
}

static int64_t tfxla_fft_work_SFX(const tfxla_fft_plan_SFX* p) {
  return p->half ? tfxla_fft_work_SFX(p->half) : p->m ? 2 * p->m : p->n;
}

/* A plan for real rows of length n: for even n, a complex transform of n/2 points (even samples as real
   parts, odd ones as imaginary parts) and the twiddles that split it; for odd n, the complex plan. */
__attribute__((unused)) static int tfxla_fft_plan_init_real_SFX(tfxla_fft_plan_SFX* p, int64_t n) {
  if (n < 2 || n % 2) return tfxla_fft_plan_init_SFX(p, n);
  memset(p, 0, sizeof(*p));
  p->n = n;
  p->half = (tfxla_fft_plan_SFX*)calloc(1, sizeof(tfxla_fft_plan_SFX));
  p->rtw = (CT*)malloc(sizeof(CT) * (n / 2));
  if (!p->half || !p->rtw || tfxla_fft_plan_init_SFX(p->half, n / 2)) { tfxla_fft_plan_free_SFX(p); return 1; }
  for (int64_t k = 0; k < n / 2; ++k) {
    const double a = -2.0 * TFXLA_PI * (double)k / (double)n;
    p->rtw[k] = CMPLX_(cos(a), sin(a));
  }
  return 0;
}

/* dst[0..n/2] = the non-negative frequencies of the real row src[0..n) (p: a real plan). */
static void tfxla_rfft_row_SFX(const tfxla_fft_plan_SFX* p, const FT* src, CT* dst, CT* row, CT* work) {
  const int64_t n = p->n, m = n / 2;
  if (!p->half) {
    for (int64_t k = 0; k < n; ++k) row[k] = src[k];
    tfxla_fft_exec_SFX(p, row, work, 0);
    for (int64_t k = 0; k <= m; ++k) dst[k] = row[k];
    return;
  }
  for (int64_t k = 0; k < m; ++k) row[k] = CMPLX_(src[2 * k], src[2 * k + 1]);
  tfxla_fft_exec_SFX(p->half, row, work, 0);
  dst[0] = CMPLX_(creal(row[0]) + cimag(row[0]), 0);
  dst[m] = CMPLX_(creal(row[0]) - cimag(row[0]), 0);
  for (int64_t k = 1; k < m; ++k) {  /* X = E + w^k O with E, O the even and odd samples' spectra */
    const CT a = row[k], b = conj(row[m - k]);
    dst[k] = (a + b) * (FT)0.5 + CMUL(p->rtw[k], MULI(b - a) * (FT)0.5);
  }
}

/* dst[0..n) = scale * the unnormalized inverse of the Hermitian spectrum src[0..n/2] (p: a real plan); the
   imaginary parts of src[0] and (n even) src[n/2] are ignored. */
static void tfxla_irfft_row_SFX(const tfxla_fft_plan_SFX* p, const CT* src, FT* dst, CT* row, CT* work, FT scale) {
  const int64_t n = p->n, m = n / 2;
  if (!p->half) {
    for (int64_t k = 0; k <= m; ++k) row[k] = src[k];
    for (int64_t k = m + 1; k < n; ++k) row[k] = conj(src[n - k]);
    tfxla_fft_exec_SFX(p, row, work, 1);
    for (int64_t k = 0; k < n; ++k) dst[k] = creal(row[k]) * scale;
    return;
  }
  const FT x0 = creal(src[0]), xm = creal(src[m]);
  row[0] = CMPLX_(x0 + xm, x0 - xm);
  for (int64_t k = 1; k < m; ++k) {  /* 2 (E + i O), E and O the even and odd samples' spectra */
    const CT a = src[k], b = conj(src[m - k]);
    row[k] = (a + b) + MULI(CMUL(a - b, conj(p->rtw[k])));
  }
  tfxla_fft_exec_SFX(p->half, row, work, 1);
  for (int64_t k = 0; k < m; ++k) {
    dst[2 * k] = creal(row[k]) * scale;
    dst[2 * k + 1] = cimag(row[k]) * scale;
  }
}

/* The lines of one axis, as tasks. kind: 0 complex in place, 1 real rows -> half spectra, 2 half spectra -> real. */
typedef struct {
  const tfxla_fft_plan_SFX* plan;
  const void* in;
  void* out;
  int64_t len, inner, half;
  int kind, inverse;
  volatile int failed;
} tfxla_fft_task_SFX;

static void tfxla_fft_lines_SFX(void* ctx_, int64_t begin, int64_t end) {
  tfxla_fft_task_SFX* const c = (tfxla_fft_task_SFX*)ctx_;
  const tfxla_fft_plan_SFX* const p = c->plan;
  const int64_t n = c->len, inner = c->inner, h = c->half;
  const int64_t rows = c->kind == 0 && inner > 1 ? TFXLA_LINE_BLOCK : 1;  /* strided lines: a block at once */
  CT* const row = (CT*)malloc(sizeof(CT) * (rows * n + tfxla_fft_work_SFX(p)));
  if (!row) { c->failed = 1; return; }
  CT* const work = row + rows * n;
  const FT scale = c->inverse ? (FT)1 / (FT)n : (FT)1;
  for (int64_t line = begin; line < end;) {
    if (c->kind == 1) {
      tfxla_rfft_row_SFX(p, (const FT*)c->in + line * n, (CT*)c->out + line * h, row, work);
      ++line;
    } else if (c->kind == 2) {
      tfxla_irfft_row_SFX(p, (const CT*)c->in + line * h, (FT*)c->out + line * n, row, work, scale);
      ++line;
    } else if (inner == 1) {
      CT* const base = (CT*)c->out + line * n;
      tfxla_fft_exec_SFX(p, base, work, c->inverse);
      if (c->inverse) for (int64_t k = 0; k < n; ++k) base[k] *= scale;
      ++line;
    } else {  /* lines j..j+count of one outer index: neighbours in memory, gathered together */
      const int64_t j = line % inner;
      int64_t count = inner - j < rows ? inner - j : rows;
      if (count > end - line) count = end - line;
      CT* const base = (CT*)c->out + (line / inner) * n * inner + j;
      for (int64_t k = 0; k < n; ++k)
        for (int64_t b = 0; b < count; ++b) row[b * n + k] = base[k * inner + b];
      for (int64_t b = 0; b < count; ++b) tfxla_fft_exec_SFX(p, row + b * n, work, c->inverse);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t b = 0; b < count; ++b) base[k * inner + b] = row[b * n + k] * scale;
      line += count;
    }
  }
  free(row);
}

/* Runs `lines` lines of one axis (see tfxla_fft_task); returns 1 when a task could not allocate. */
static int tfxla_fft_run_SFX(const tfxla_fft_plan_SFX* plan, const void* in, void* out, int64_t lines, int64_t len,
                             int64_t inner, int64_t half, int kind, int inverse, int64_t parallel_threshold) {
  tfxla_fft_task_SFX c = {plan, in, out, len, inner, half, kind, inverse, 0};
  if (lines * len >= parallel_threshold) tfxla_parallel(lines, tfxla_fft_lines_SFX, &c);
  else tfxla_fft_lines_SFX(&c, 0, lines);
  return c.failed;
}
"""


def common_c() -> str:
    """The precision-free part of the library (written once per module, before ``precision_c``)."""
    return _COMMON.replace("BLUESTEIN_LIMIT", str(BLUESTEIN_PRIME))


def precision_c(sfx: str) -> str:
    """The library for one precision: ``"f"`` (c64) or ``"d"`` (c128)."""
    real, cplx, suffix = {"f": ("float", "float _Complex", "f"), "d": ("double", "double _Complex", "")}[sfx]
    # suffix: of the complex helpers (complex_c.py) and of C11's CMPLXF/CMPLX
    text = _TEMPLATE.replace("CMUL", "tfxla_cmul" + suffix).replace("MULI", "tfxla_muli" + suffix)
    text = text.replace("CMPLX_", "CMPLX" + suffix.upper())
    return text.replace("FT", real).replace("CT", cplx).replace("SFX", sfx)
