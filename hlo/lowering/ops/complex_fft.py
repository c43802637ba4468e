"""Complex numbers and FFTs: ``Complex``, ``Real``, ``Imag``, ``ComplexAbs``, ``Conj``, ``Angle`` and the
``FFT``/``IFFT``/``RFFT``/``IRFFT`` families (1-D to 3-D), as tf2xla lowers them.

* ``Complex(real, imag)`` broadcasts like any binary op; ``Conj`` is ``complex(real(x), -imag(x))`` and
  ``Angle`` is ``atan2(imag(x), real(x))``; ``ComplexAbs`` is HLO's ``abs`` (a hypot, no overflow).
* ``FFT*``/``IFFT*`` transform the innermost 1, 2 or 3 dims of a complex tensor; ``IFFT`` divides by
  the number of points (HLO's fft does).
* ``RFFT*(input, fft_length)``: each transformed dim of the real input is cropped or zero-padded to
  ``fft_length`` first; the innermost result dim is ``fft_length[-1] / 2 + 1``.
  ``IRFFT*(input, fft_length)``: the complex input is cropped or zero-padded to ``fft_length`` with the
  innermost dim ``fft_length[-1] / 2 + 1``; the imaginary parts of its zero (and Nyquist) frequencies
  are ignored. ``fft_length`` must be a compile-time constant (it decides the result's shape).

Arithmetic that TF has complex kernels for (``AddV2``, ``Mul``, ``RealDiv``, ``Exp``, ``Sqrt``, ``Sum``,
...) takes complex64/complex128 in its own family's rule (the table above lists the dtypes); data
movement takes every dtype; ``Cast`` from complex to real keeps the real part. The CPU backend computes
them all; the CUDA backend refuses complex types.
"""

from __future__ import annotations

from hlo.attributes import FftType, PadDim, SliceDim
from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import COMPLEX
from hlo.opcodes import Opcode

REALS = frozenset({P.F32, P.F64})
_COMPLEX_OF = {P.F32: P.C64, P.F64: P.C128}


@register_lowering("Complex", dtypes=REALS)
def complex_(ctx: LoweringContext) -> Value:
    re, im = ctx.inputs
    return ctx.binary(Opcode.COMPLEX, re, im)


def _unary(opcode: Opcode) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        (x,) = ctx.inputs
        return ctx.b.op(opcode, x)
    return lower


for _op, _opcode in {"Real": Opcode.REAL, "Imag": Opcode.IMAG, "ComplexAbs": Opcode.ABS}.items():
    register_lowering(_op, dtypes=COMPLEX)(_unary(_opcode))


@register_lowering("Conj", dtypes=COMPLEX)
def conj(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.b.complex(ctx.b.real(x), ctx.b.negate(ctx.b.imag(x)))


@register_lowering("Angle", dtypes=COMPLEX)
def angle(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.b.atan2(ctx.b.imag(x), ctx.b.real(x))


# --- FFTs ----------------------------------------------------------------------------------------


def _fft(ctx: LoweringContext, x: Value, kind: FftType, lengths: tuple[int, ...]) -> Value:
    return ctx.b.fft(x, fft_type=kind, fft_length=lengths)


def _complex_fft(kind: FftType, rank: int) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        (x,) = ctx.inputs
        dims = ctx.dims(x)
        if len(dims) < rank:
            raise ctx.invalid_argument(f"Input must have rank of at least {rank} but got: {len(dims)}")
        return _fft(ctx, x, kind, dims[len(dims) - rank:])
    return lower


def _fit(ctx: LoweringContext, x: Value, sizes: tuple[int, ...]) -> Value:
    """``x`` with its innermost dims cropped or zero-padded to ``sizes`` (TF's RFFT/IRFFT inputs)."""
    dims = ctx.dims(x)
    lead = len(dims) - len(sizes)
    want = dims[:lead] + tuple(sizes)
    if any(d > w for d, w in zip(dims, want)):
        x = ctx.b.slice(x, slice=tuple(SliceDim(0, min(d, w)) for d, w in zip(dims, want)))
        dims = ctx.dims(x)
    if dims != want:
        x = ctx.b.pad(x, ctx.scalar(0, ctx.dtype(x)), padding=tuple(PadDim(0, w - d) for d, w in zip(dims, want)))
    return x


def _real_fft(kind: FftType, rank: int) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        x = ctx.inputs[0]
        dims = ctx.dims(x)
        if len(dims) < rank:
            raise ctx.invalid_argument(f"Input must have rank of at least {rank} but got: {len(dims)}")
        lengths = tuple(ctx.const_ints(1))
        if len(lengths) != rank:
            raise ctx.invalid_argument(f"fft_length must be length {rank} vector, got {list(lengths)}")
        if any(n < 0 for n in lengths):
            raise ctx.invalid_argument(f"fft_length must not be negative, got {list(lengths)}")
        sizes = lengths
        if kind is FftType.IRFFT:
            sizes = lengths[:-1] + (lengths[-1] // 2 + 1 if lengths[-1] else 0,)
            x = ctx.convert(x, ctx.dtype_attr("Tcomplex"))
        else:
            x = ctx.convert(x, ctx.dtype_attr("Treal"))
        out = _fft(ctx, _fit(ctx, x, sizes), kind, lengths)
        want = ctx.dtype_attr("Treal") if kind is FftType.IRFFT else ctx.dtype_attr("Tcomplex")
        if ctx.dtype(out) != want:
            raise ctx.error(f"{ctx.op_type}: Treal and Tcomplex must be float32/complex64 or float64/complex128")
        return out
    return lower


_SUFFIX = {1: "", 2: "2D", 3: "3D"}
for _rank, _sfx in _SUFFIX.items():
    register_lowering(f"FFT{_sfx}", dtypes=COMPLEX, type_attrs=("Tcomplex",))(_complex_fft(FftType.FFT, _rank))
    register_lowering(f"IFFT{_sfx}", dtypes=COMPLEX, type_attrs=("Tcomplex",))(_complex_fft(FftType.IFFT, _rank))
    register_lowering(f"RFFT{_sfx}", dtypes=REALS | COMPLEX, type_attrs=("Treal", "Tcomplex"),
                      const_inputs=(1,))(_real_fft(FftType.RFFT, _rank))
    register_lowering(f"IRFFT{_sfx}", dtypes=REALS | COMPLEX, type_attrs=("Treal", "Tcomplex"),
                      const_inputs=(1,))(_real_fft(FftType.IRFFT, _rank))
