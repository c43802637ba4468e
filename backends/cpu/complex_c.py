"""C helpers of a CPU kernel that computes with complex numbers (c64 as C99 ``float _Complex``, c128 as
``double _Complex``): written once, at the top of a module's globals, when any of its shapes is complex
(``module_uses_complex``); a module without complex values gets none of it, so its source is unchanged.

``<complex.h>`` provides ``CMPLXF``/``CMPLX`` and the libm functions (``cexpf``, ``clogf``, ``csqrtf``,
``cabsf``, ...); its ``complex`` and ``I`` macros are undefined so that no generated name can collide.
Multiplication is the textbook formula ``(ac - bd) + (ad + bc)i``, as XLA's elemental emitter writes it
(C's ``*`` on ``_Complex`` adds Annex G's NaN recovery, a libgcc call, and does not vectorize); division
is C's (Annex G, with scaling), and ``sign(x)`` is ``x / |x|`` (0 at 0), as the evaluator's. ``|x|`` of a
c64 is computed in double (``tfxla_cabsf``: vectorizes, within one rounding of hypot), of a c128 by ``cabs``.
"""

from __future__ import annotations

from hlo.ir import HloModule
from hlo.shapes import Shape, TupleShape

COMPLEX_C = r"""
#include <complex.h>
#undef complex
#undef I
static inline float _Complex tfxla_cmulf(float _Complex a, float _Complex b) {
  return CMPLXF(crealf(a) * crealf(b) - cimagf(a) * cimagf(b), crealf(a) * cimagf(b) + cimagf(a) * crealf(b));
}
static inline double _Complex tfxla_cmul(double _Complex a, double _Complex b) {
  return CMPLX(creal(a) * creal(b) - cimag(a) * cimag(b), creal(a) * cimag(b) + cimag(a) * creal(b));
}
/* |x| of a c64 in double: exact squares, no overflow, one rounding of a correctly rounded sqrt (cabsf, a
   hypotf call, does not vectorize); an infinite part gives inf even when the other is NaN, as hypot. */
static inline float tfxla_cabsf(float _Complex x) {
  const double r = crealf(x), i = cimagf(x);
  return (isinf(r) || isinf(i)) ? INFINITY : (float)sqrt(r * r + i * i);
}
static inline float _Complex tfxla_mulif(float _Complex a) { return CMPLXF(-cimagf(a), crealf(a)); }
static inline double _Complex tfxla_muli(double _Complex a) { return CMPLX(-cimag(a), creal(a)); }
static inline float _Complex tfxla_csignf(float _Complex x) {
  const float r = cabsf(x);
  return r == 0.0f ? CMPLXF(0.0f, 0.0f) : CMPLXF(crealf(x) / r, cimagf(x) / r);
}
static inline double _Complex tfxla_csign(double _Complex x) {
  const double r = cabs(x);
  return r == 0.0 ? CMPLX(0.0, 0.0) : CMPLX(creal(x) / r, cimag(x) / r);
}
"""


def _complex_shape(shape) -> bool:
    if isinstance(shape, TupleShape):
        return any(_complex_shape(e) for e in shape.elements)
    return isinstance(shape, Shape) and shape.dtype.is_complex


def module_uses_complex(module: HloModule) -> bool:
    """Whether any instruction of ``module`` has a complex shape (operands are instructions too)."""
    return any(_complex_shape(inst.shape) for comp in module.computations for inst in comp.instructions)
