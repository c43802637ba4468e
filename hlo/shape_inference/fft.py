"""Shape rule of fft (XLA's ``InferFftShape``).

``fft_length`` (1 to 3 sizes) names the transformed dims: the operand's last ``len(fft_length)``.
* FFT, IFFT: complex in, the same shape out; the transformed dims equal ``fft_length``.
* RFFT: f32/f64 in (transformed dims equal ``fft_length``), c64/c128 out, the last dim ``n/2 + 1``.
* IRFFT: c64/c128 in, the last dim ``n/2 + 1`` and the others ``fft_length``; f32/f64 out with the
  transformed dims ``fft_length``.
"""

from __future__ import annotations

from hlo.attributes import FftType
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import array, fail, int_list, operand, short
from hlo.shapes import Shape

COMPLEX_OF = {P.F32: P.C64, P.F64: P.C128}
REAL_OF = {c: r for r, c in COMPLEX_OF.items()}


@shape_rule(Opcode.FFT)
def fft(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0)
    kind = ctx.attr("fft_type")
    if not isinstance(kind, FftType):
        raise fail(ctx, f"fft_type must be one of FFT, IFFT, RFFT, IRFFT, got {kind}")
    lengths = int_list(ctx, "fft_length")
    if not 1 <= len(lengths) <= 3:
        raise fail(ctx, f"fft_length must have 1 to 3 sizes, got {list(lengths)}")
    if any(n < 0 for n in lengths):
        raise fail(ctx, f"fft_length must not be negative, got {list(lengths)}")
    k = len(lengths)
    if x.rank < k:
        raise fail(ctx, f"operand {short(x)} has fewer dims than fft_length {list(lengths)}")
    batch, last = x.dims[:x.rank - k], x.dims[x.rank - k:]
    if kind is FftType.RFFT:
        if x.dtype not in COMPLEX_OF:
            raise fail(ctx, f"RFFT takes f32 or f64, got {short(x)}")
        _expect(ctx, x, last, lengths)
        half = lengths[-1] // 2 + 1 if lengths[-1] else 0
        return array(COMPLEX_OF[x.dtype], (*batch, *lengths[:-1], half))
    if x.dtype not in REAL_OF:
        raise fail(ctx, f"{kind.value} takes c64 or c128, got {short(x)}")
    if kind is FftType.IRFFT:
        half = lengths[-1] // 2 + 1 if lengths[-1] else 0
        _expect(ctx, x, last, (*lengths[:-1], half))
        return array(REAL_OF[x.dtype], (*batch, *lengths))
    _expect(ctx, x, last, lengths)
    return array(x.dtype, x.dims)


def _expect(ctx: ShapeContext, x: Shape, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    if tuple(got) != tuple(want):
        raise fail(ctx, f"{ctx.attr('fft_type').value} with fft_length {list(int_list(ctx, 'fft_length'))} "
                        f"needs the last dims of the operand to be {list(want)}, got {short(x)}")
