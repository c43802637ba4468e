"""Evaluator rule for fft: NumPy's FFT over the last ``len(fft_length)`` dims, computed in complex128
and rounded to the result type.

XLA's semantics: FFT is unnormalized, IFFT divides by the product of ``fft_length``; RFFT keeps the
``n/2 + 1`` non-negative frequencies of the last dim; IRFFT reads ``n/2 + 1`` values of the last dim
as the Hermitian half of a spectrum, so the imaginary parts of the zero (and, for even ``n``, the
Nyquist) frequency are ignored.
"""

from __future__ import annotations

import numpy as np

from hlo.attributes import FftType
from hlo.evaluator import eval_rule
from hlo.opcodes import Opcode


@eval_rule(Opcode.FFT)
def _fft(ev, inst, vals):
    (x,) = vals
    lengths = tuple(inst.attr("fft_length"))
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    out = np.zeros(inst.shape.dims, inst.shape.dtype.numpy)
    if out.size == 0 or x.size == 0:
        return out
    kind = inst.attr("fft_type")
    if kind is FftType.FFT:
        return np.fft.fftn(x.astype(np.complex128), axes=axes)
    if kind is FftType.IFFT:
        return np.fft.ifftn(x.astype(np.complex128), axes=axes)
    if kind is FftType.RFFT:
        return np.fft.rfftn(x.astype(np.float64), axes=axes)
    return np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes)
