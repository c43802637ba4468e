"""A per-call proof that a oneDNN primitive's NaN-masking post-ops are exact, and the check that runs it.

oneDNN's ``relu``, ``clip``, binary ``max``/``min`` and ``exp`` post-ops are exact for a non-NaN
accumulator and wrong for a NaN one (they return the bound, the side value, +inf), so an output fusion
ending in them is computed NaN-keeping: the primitive stops before them and a loop over the result
applies them (``dnnl_epilogue``). That loop is a visible share of memory-bound layers. A NaN in the chain
can only come from a non-finite input (activation, weights, bias, side operand) or from an intermediate
overflowing to +-inf (finite partial sums reaching +inf and -inf, inf * 0, ...). So the kernel also
builds the primitive with those post-ops (``exact_nan=False``, the fast one) and, per call, runs it
when a bound proves every intermediate finite:

    b = max|src| * max|weights| * K            (K: products summed per output element)
    b += max|bias|, then per post-op: linear(a, c): |a| b + |c|; add/sub: b + max|s|; mul: b * max|s|;
    max/min: max(b, max|s|); relu: b; clip(lo, hi): max(b, finite |lo|, |hi|); exp: e^b

with every ``b < FINITE_LIMIT`` (1e37, FLT_MAX / 34: room for the float rounding of a K-term sum,
(1 + 2^-24)^K < 34 up to K = 5.9e7). ``max|t|`` is one vectorized read of ``t``'s bit patterns
(``tfxla_absmax_*``: the unsigned maximum of ``bits & 0x7fff...``, which orders NaN and inf above every
finite value and is returned as +inf; a large one in ``REDUCTION_PARTS`` parts on the caller's threads,
``backends/cpu/parallel.py``); for constants it is computed once in ``tfxla_init``. Otherwise
the NaN-keeping primitive and loop run. A chain with any other post-op (tanh, log, ...), f16 inputs,
or a check that would read more than ``CHECK_RATIO`` times the result's elements (and more than
``CHECK_FREE``) per call has no fast primitive: e.g. a matmul with parameter weights and few rows,
where the loop is cheap next to the library op anyway.
"""

from __future__ import annotations

import math

from backends.cpu.dnnl import Binary, DnnlPrimitive, Eltwise, Tensor
from backends.cpu.parallel import REDUCTION_PARTS
from hlo.dtypes import PrimitiveType as P

FINITE_LIMIT = 1e37
# The check reads its inputs once; the NaN-keeping loop it saves reads and writes the result. A check of
# at most CHECK_FREE elements (16 KiB, well under a microsecond) is always worth it.
CHECK_RATIO = 2
CHECK_FREE = 4096

_ABSMAX = {P.F32: "tfxla_absmax_f32", P.BF16: "tfxla_absmax_bf16"}

_HELPERS = r"""
/* max |x| over n floats (bf16: their top halves) from their bit patterns: +inf when one is NaN or +-inf.
   From the end backwards: the library op then starts on the part this left in cache. With par, in
   TFXLA_ABSMAX_PARTS parts on the caller's threads (tfxla_parallel), combined after. */
#define TFXLA_ABSMAX_PARTS @PARTS@
#define TFXLA_ABSMAX_LOOP(T, MASK, LO, HI) \
  for (int64_t i = (HI) - 1; i >= (LO); --i) { const T v = (T)(u[i] & MASK); m = v > m ? v : m; }
#define TFXLA_ABSMAX(NAME, T, MASK) \
  typedef struct { const T* u; int64_t n; T part[TFXLA_ABSMAX_PARTS]; } NAME##_ctx; \
  static void NAME##_part(void* ctx_, int64_t begin, int64_t end) { \
    NAME##_ctx* const c = (NAME##_ctx*)ctx_; \
    const T* const u = c->u; \
    for (int64_t t = begin; t < end; ++t) { \
      T m = 0; \
      _Pragma("omp simd reduction(max:m)") \
      TFXLA_ABSMAX_LOOP(T, MASK, t * c->n / TFXLA_ABSMAX_PARTS, (t + 1) * c->n / TFXLA_ABSMAX_PARTS) \
      c->part[t] = m; \
    } \
  } \
  static T NAME##_bits(const void* p, int64_t n, int par) { \
    const T* const u = (const T*)p; \
    T m = 0; \
    if (!par) { \
      TFXLA_ABSMAX_LOOP(T, MASK, 0, n) \
      return m; \
    } \
    NAME##_ctx c = {u, n, {0}}; \
    tfxla_parallel(TFXLA_ABSMAX_PARTS, NAME##_part, &c); \
    for (int t = 0; t < TFXLA_ABSMAX_PARTS; ++t) m = c.part[t] > m ? c.part[t] : m; \
    return m; \
  }
TFXLA_ABSMAX(tfxla_absmax_u32, uint32_t, 0x7fffffffu)
TFXLA_ABSMAX(tfxla_absmax_u16, uint16_t, 0x7fffu)
__attribute__((unused)) static double tfxla_absmax_f32(const void* p, int64_t n, int par) {
  const uint32_t m = tfxla_absmax_u32_bits(p, n, par);
  if (m >= 0x7f800000u) return INFINITY;
  float f;
  memcpy(&f, &m, sizeof f);
  return f;
}
__attribute__((unused)) static double tfxla_absmax_bf16(const void* p, int64_t n, int par) {
  const uint16_t m = tfxla_absmax_u16_bits(p, n, par);
  if (m >= 0x7f80u) return INFINITY;
  const uint32_t w = (uint32_t)m << 16;
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}
""".replace("@PARTS@", str(REDUCTION_PARTS))


def span(t: Tensor) -> int:
    """Elements from ``t.ptr`` covering every element of the view (all inside its buffer)."""
    return 1 + sum((d - 1) * s for d, s in zip(t.dims, t.strides))


def contraction(prim: DnnlPrimitive) -> int:
    """Products summed into one output element: K of a matmul, input channels per group x window of a
    convolution (weights ``[..., K, N]`` / ``[(G,) O, I, spatial...]``)."""
    if prim.conv is None:
        return prim.wei.dims[-2]
    return math.prod(prim.wei.dims[-(len(prim.conv.strides) + 1):])


def _steps(prim: DnnlPrimitive) -> list[tuple[str, Tensor | None]] | None:
    """The bound's updates of ``b_`` after the dot: C statements, each with the tensor whose max|.| it
    reads as ``m_`` (None: none); None when a post-op has no bound here."""
    out: list[tuple[str, Tensor | None]] = []
    if prim.bias is not None:
        out.append(("b_ += m_;", prim.bias))
    for op in prim.post_ops:
        if isinstance(op, Binary):
            step = {"add": "b_ += m_;", "sub": "b_ += m_;", "mul": "b_ *= m_;", "max": "b_ = fmax(b_, m_);",
                    "min": "b_ = fmax(b_, m_);"}.get(op.alg)
            if step is None:
                return None
            out.append((step, op.src1))
        elif op.alg == "linear":
            out.append((f"b_ = {abs(op.alpha)!r} * b_ + {abs(op.beta)!r};", None))
        elif op.alg == "relu" and op.alpha == 0:
            continue
        elif op.alg == "clip":
            finite = [abs(v) for v in (op.alpha, op.beta) if math.isfinite(v)]
            if finite:
                out.append((f"b_ = fmax(b_, {max(finite)!r});", None))
        elif op.alg == "exp":
            out.append(("b_ = exp(b_);", None))
        else:
            return None
    return out


def _tensors(prim: DnnlPrimitive) -> list[Tensor]:
    return [prim.src, prim.wei] + [t for _, t in _steps(prim) or () if t is not None]


def applies(prim: DnnlPrimitive, src_bounded: bool = False) -> bool:
    """Whether ``prim`` (the fast primitive) can be guarded, at a per-call cost worth it (``src_bounded``: the
    source's bound usually comes from the guarded op computing it, ``emit_check``)."""
    if _steps(prim) is None or any(t.dtype not in _ABSMAX for t in _tensors(prim)):
        return False
    read = _tensors(prim)[1:] if src_bounded else _tensors(prim)
    per_call = sum(span(t) for t in read if t.const is None)
    return per_call <= max(CHECK_RATIO * math.prod(prim.dst.dims), CHECK_FREE)


def emit_check(em, prim: DnnlPrimitive, src_bound: str | None = None) -> tuple[str, str]:
    """Write into ``em.buf`` the code setting a fresh int variable to 1 when the bound proves ``prim``'s chain
    finite for this call's inputs (``applies(prim)`` must hold), and a fresh double variable, declared at the
    top of the function, to the bound of ``prim``'s result when it is 1 (+inf otherwise); returns both
    names. ``src_bound``: such a variable of the instruction computing ``prim.src``, used instead of
    reading the source when finite (a guarded layer feeding the next: MobileNetV2's expansion and
    depthwise convolutions)."""
    gen = em.gen
    if "_dnnl_guard" not in gen.__dict__:
        gen.__dict__["_dnnl_guard"] = 0
        gen.globals.line(_HELPERS)
    threshold = gen.options.parallel_threshold

    def absmax(t: Tensor) -> str:
        if t.const is None:
            return f"{_ABSMAX[t.dtype]}((const void*)({t.ptr}), {span(t)}, {int(span(t) >= threshold)})"
        k = gen.__dict__["_dnnl_guard"]
        gen.__dict__["_dnnl_guard"] = k + 1
        gen.state_fields.line(f"double dnnl_absmax{k};  /* max |{t.const}|, +inf if not all finite */")
        gen.init_code.line(f"st->dnnl_absmax{k} = {_ABSMAX[t.dtype]}((const void*){t.const}, {span(t)}, 0);")
        return f"tfxla_st->dnnl_absmax{k}"

    ok, bound = em.names.fresh("fast"), em.names.fresh("bound")
    em.decls.line(f"double {bound} = INFINITY;  /* max |result| of a guarded oneDNN op that ran fast */")
    b = em.buf
    b.line(f"int {ok};")
    with b.block(""):
        src = absmax(prim.src) if src_bound is None else f"({src_bound} < INFINITY ? {src_bound} : {absmax(prim.src)})"
        b.line(f"double b_ = {src} * {absmax(prim.wei)} * {contraction(prim)}.0, m_ = 0;")
        b.line("(void)m_;")
        b.line(f"int ok_ = b_ < {FINITE_LIMIT!r};")
        for step, t in _steps(prim) or ():
            if t is not None:
                b.line(f"m_ = {absmax(t)};")
            b.line(step)
            b.line(f"ok_ &= b_ < {FINITE_LIMIT!r};")
        b.line(f"{ok} = ok_;")
        if prim.dst.dtype in _OUTPUT_ROUNDING:  # the result, stored in its type, is finite and at most this
            b.line(f"{bound} = ok_ ? b_ * {_OUTPUT_ROUNDING[prim.dst.dtype]!r} : INFINITY;")
    return ok, bound


_OUTPUT_ROUNDING = {P.F32: 1.0, P.BF16: 1.0 + 2.0 ** -7}
