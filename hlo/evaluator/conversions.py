"""Evaluator rules that change element types: convert, bitcast-convert, reduce-precision.

Also the bit-level helpers the elementwise rules share (``widen``, ``unsigned_bits``).

convert, as XLA CPU does it (checked against TF's XLA):
* float -> int truncates toward zero and saturates to the type's range; NaN -> 0;
* int -> int wraps modulo 2^bits; anything -> pred is ``x != 0`` (NaN -> true);
  pred -> anything is 0 or 1;
* int -> f16/bf16/f8 goes through f32, so ints above 2^24 round twice, as in XLA;
* float -> float rounds to nearest even (f64 -> bf16 through f32, like XLA);
* real -> complex sets a zero imaginary part; complex -> real is not an HLO conversion.

bitcast-convert reinterprets bits, little-endian: to a narrower type a new minor
dim of size (in bits / out bits) holds the pieces, least significant first; to a
wider type that minor dim is consumed.

reduce-precision rounds the mantissa to nearest even, then flushes exponents
the narrow format lacks: overflow -> signed inf, underflow (every subnormal of
the narrow format included) -> signed zero. NaN stays NaN whatever the bit counts.
"""

from __future__ import annotations

import numpy as np

from hlo.dtypes import PrimitiveType
from hlo.errors import HloEvaluationError
from hlo.evaluator import eval_rule
from hlo.opcodes import Opcode

P = PrimitiveType
_UINT: dict[int, np.dtype] = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
_SUB_BYTE_CONTAINER = {P.S4: np.dtype(np.int8), P.U4: np.dtype(np.uint8)}
# (exponent bits, mantissa bits) of the float formats reduce-precision accepts.
_FLOAT_FORMAT = {P.F16: (5, 10), P.BF16: (8, 7), P.F32: (8, 23), P.F64: (11, 52)}


def ptype(x: np.ndarray) -> PrimitiveType:
    return PrimitiveType.from_numpy(x.dtype)


def widen(x: np.ndarray) -> np.ndarray:
    """The array to compute on: f16/bf16/f8 as f32 (XLA CPU upcasts them), s4/u4 as s8/u8.

    Results are cast back to the declared type by the driver; integer results wrap there.
    """
    t = ptype(x)
    if t.is_float and t.bit_width < 32:
        return x.astype(np.float32)
    if t in _SUB_BYTE_CONTAINER:
        return x.astype(_SUB_BYTE_CONTAINER[t])
    return x


def unsigned_bits(x: np.ndarray) -> tuple[np.ndarray, int]:
    """(bit pattern as an unsigned array, bit width) of integer, pred, float or complex values."""
    t = ptype(x)
    if t in _SUB_BYTE_CONTAINER:
        return x.astype(np.int8).view(np.uint8) & np.uint8(0xF), 4
    if t.is_pred:
        return x.astype(np.uint8), 8
    return x.view(_UINT[t.bit_width]), t.bit_width


def from_unsigned_bits(bits: np.ndarray, dtype: PrimitiveType) -> np.ndarray:
    """Inverse of ``unsigned_bits``: values of ``dtype`` whose bit patterns are ``bits``."""
    if dtype in _SUB_BYTE_CONTAINER:
        nibble = bits.astype(np.int16) & 0xF
        if dtype.is_signed_int:
            nibble = np.where(nibble >= 8, nibble - 16, nibble)
        return nibble.astype(dtype.numpy)
    if dtype.is_pred:
        return bits != 0
    return bits.astype(_UINT[dtype.bit_width]).view(dtype.numpy)


# --- convert ----------------------------------------------------------------


def convert_array(x: np.ndarray, dst: PrimitiveType) -> np.ndarray:
    """XLA's ``convert`` of ``x`` to element type ``dst`` (see the module docstring)."""
    with np.errstate(all="ignore"):  # overflow to inf is the defined result
        return _convert(x, dst)


def _convert(x: np.ndarray, dst: PrimitiveType) -> np.ndarray:
    src = ptype(x)
    if src is dst:
        return x
    if dst.is_pred:
        return x != 0
    if src.is_pred:
        x, src = x.astype(np.uint8), P.U8
    if src.is_complex:
        if dst.is_complex:
            return x.astype(dst.numpy)
        raise HloEvaluationError(f"convert from complex {src} to real {dst} is not an HLO conversion")
    if dst.is_complex:
        return widen(x).astype(dst.numpy)
    if src.is_float and dst.is_integral:
        return _float_to_int(x, dst)
    if src.is_integral and dst.is_float and dst.bit_width < 32:
        return x.astype(np.float32).astype(dst.numpy)
    if src in _SUB_BYTE_CONTAINER and dst in _SUB_BYTE_CONTAINER:  # ml_dtypes refuses s4 <-> u4; wrap via s8
        return x.astype(np.int8).astype(dst.numpy)
    return x.astype(dst.numpy)


def _float_to_int(x: np.ndarray, dst: PrimitiveType) -> np.ndarray:
    bits = dst.bit_width
    signed = dst.is_signed_int
    lo = -(1 << (bits - 1)) if signed else 0
    hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    wide = np.dtype(np.int64) if signed else np.dtype(np.uint64)
    t = np.trunc(x.astype(np.float64))
    under = t < lo
    over = t >= float(hi + 1)  # 2^(bits-1) or 2^bits: exact in f64, unlike hi itself for 64-bit types
    inside = np.where(np.isnan(t) | under | over, 0.0, t).astype(wide)
    out = np.where(under, np.array(lo, wide), np.where(over, np.array(hi, wide), inside))
    return out.astype(dst.numpy)


@eval_rule(Opcode.CONVERT)
def _convert_rule(ev, inst, vals):
    return convert_array(vals[0], inst.shape.dtype)


# --- bitcast-convert ----------------------------------------------------------


def bitcast_convert_array(x: np.ndarray, dst: PrimitiveType) -> np.ndarray:
    """XLA's ``bitcast-convert`` of ``x`` to element type ``dst``."""
    src = ptype(x)
    w_in, w_out = src.bit_width, dst.bit_width
    if src in _SUB_BYTE_CONTAINER or dst in _SUB_BYTE_CONTAINER or src.is_pred or dst.is_pred:
        return _bitcast_convert_bits(x, dst, w_in, w_out)
    if w_in == w_out:
        return x.view(dst.numpy)
    if w_in > w_out:
        # np.array (not ascontiguousarray) keeps rank 0; the view appends the minor dim.
        return np.array(x, order="C").reshape(x.shape + (1,)).view(dst.numpy)
    if x.ndim == 0 or x.shape[-1] != w_out // w_in:
        raise HloEvaluationError(f"bitcast-convert {src}{list(x.shape)} -> {dst} needs a minor dim of "
                                 f"{w_out // w_in}")
    return np.array(x, order="C").view(dst.numpy).reshape(x.shape[:-1])


def _bitcast_convert_bits(x: np.ndarray, dst: PrimitiveType, w_in: int, w_out: int) -> np.ndarray:
    """bitcast-convert through integer bit patterns, for types narrower than a byte (and pred)."""
    if max(w_in, w_out) > 64:
        raise HloEvaluationError(f"bitcast-convert {ptype(x)} -> {dst} is not supported")
    bits, _ = unsigned_bits(x)
    bits = bits.astype(np.uint64)
    if w_in > w_out:
        k, mask = w_in // w_out, np.uint64((1 << w_out) - 1)
        shifts = np.arange(k, dtype=np.uint64) * np.uint64(w_out)
        pieces = (bits[..., None] >> shifts) & mask
        return from_unsigned_bits(pieces, dst)
    if w_in < w_out:
        k = w_out // w_in
        if x.ndim == 0 or x.shape[-1] != k:
            raise HloEvaluationError(f"bitcast-convert {ptype(x)}{list(x.shape)} -> {dst} needs a minor dim of {k}")
        shifts = np.arange(k, dtype=np.uint64) * np.uint64(w_in)
        packed = np.bitwise_or.reduce(bits << shifts, axis=-1)
        return from_unsigned_bits(packed, dst)
    return from_unsigned_bits(bits, dst)


@eval_rule(Opcode.BITCAST_CONVERT)
def _bitcast_convert(ev, inst, vals):
    return bitcast_convert_array(vals[0], inst.shape.dtype)


# --- reduce-precision ---------------------------------------------------------


def reduce_precision_array(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round ``x`` to a float format with the given exponent and mantissa bits, kept in x's type."""
    src = ptype(x)
    if src not in _FLOAT_FORMAT:
        raise HloEvaluationError(f"reduce-precision of {src} is not supported")
    if exponent_bits < 1 or mantissa_bits < 0:
        raise HloEvaluationError(f"reduce-precision needs exponent_bits >= 1 and mantissa_bits >= 0, "
                                 f"got {exponent_bits} and {mantissa_bits}")
    src_e, src_m = _FLOAT_FORMAT[src]
    width = 1 + src_e + src_m
    u = _UINT[width].type
    v = np.array(x, order="C").view(_UINT[width])
    with np.errstate(all="ignore"):
        if mantissa_bits < src_m:
            shift = src_m - mantissa_bits
            last_bit = u(1 << shift)
            lsb = (v & last_bit) >> u(shift)  # 1 when the kept part is odd: ties go to even
            v = (v + lsb + u((1 << (shift - 1)) - 1)) & ~u((1 << shift) - 1)
        if exponent_bits < src_e:
            exp_mask = u(((1 << src_e) - 1) << src_m)
            sign = v & u(1 << (width - 1))
            bias, reduced_bias = (1 << (src_e - 1)) - 1, (1 << (exponent_bits - 1)) - 1
            exponent = v & exp_mask
            overflow = exponent > u((bias + reduced_bias) << src_m)
            underflow = exponent <= u((bias - reduced_bias) << src_m)
            v = np.where(overflow, sign | exp_mask, np.where(underflow, sign, v))
    out = np.asarray(v).view(x.dtype)
    return np.where(np.isnan(widen(x)), x, out)


@eval_rule(Opcode.REDUCE_PRECISION)
def _reduce_precision(ev, inst, vals):
    return reduce_precision_array(vals[0], inst.attr("exponent_bits"), inst.attr("mantissa_bits"))
