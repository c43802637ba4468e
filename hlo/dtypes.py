"""Element types of HLO shapes (XLA's PrimitiveType), with their NumPy counterparts.

Invariant: every element type has exactly one text name (``f32``) and, except
``token``, one NumPy dtype; bf16 and the narrow float types come from ``ml_dtypes``.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class PrimitiveType(enum.Enum):
    """An HLO element type; ``value`` is its text name."""

    PRED = "pred"
    S4 = "s4"
    S8 = "s8"
    S16 = "s16"
    S32 = "s32"
    S64 = "s64"
    U4 = "u4"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    F8E4M3FN = "f8e4m3fn"
    F8E5M2 = "f8e5m2"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    C64 = "c64"
    C128 = "c128"
    TOKEN = "token"

    # --- classification -------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_complex(self) -> bool:
        return self in (PrimitiveType.C64, PrimitiveType.C128)

    @property
    def is_signed_int(self) -> bool:
        return self in _SIGNED

    @property
    def is_unsigned_int(self) -> bool:
        return self in _UNSIGNED

    @property
    def is_integral(self) -> bool:
        return self.is_signed_int or self.is_unsigned_int

    @property
    def is_pred(self) -> bool:
        return self is PrimitiveType.PRED

    @property
    def is_array_type(self) -> bool:
        return self is not PrimitiveType.TOKEN

    @property
    def bit_width(self) -> int:
        return _BITS[self]

    @property
    def byte_size(self) -> int:
        return max(1, _BITS[self] // 8)

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype holding values of this type."""
        if self is PrimitiveType.TOKEN:
            raise TypeError("token has no NumPy dtype")
        return _NUMPY[self]

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def from_text(text: str) -> "PrimitiveType":
        try:
            return _BY_TEXT[text]
        except KeyError:
            raise ValueError(f"unknown element type {text!r}") from None

    @staticmethod
    def from_numpy(dtype) -> "PrimitiveType":
        dt = np.dtype(dtype)
        try:
            return _BY_NUMPY[dt]
        except KeyError:
            raise TypeError(f"NumPy dtype {dt} has no HLO element type") from None


P = PrimitiveType
_FLOATS = frozenset({P.F8E4M3FN, P.F8E5M2, P.F16, P.BF16, P.F32, P.F64})
_SIGNED = frozenset({P.S4, P.S8, P.S16, P.S32, P.S64})
_UNSIGNED = frozenset({P.U4, P.U8, P.U16, P.U32, P.U64})
_BITS = {
    P.PRED: 8, P.S4: 4, P.S8: 8, P.S16: 16, P.S32: 32, P.S64: 64,
    P.U4: 4, P.U8: 8, P.U16: 16, P.U32: 32, P.U64: 64,
    P.F8E4M3FN: 8, P.F8E5M2: 8, P.F16: 16, P.BF16: 16, P.F32: 32, P.F64: 64,
    P.C64: 64, P.C128: 128, P.TOKEN: 0,
}
_NUMPY = {
    P.PRED: np.dtype(np.bool_), P.S4: np.dtype(ml_dtypes.int4), P.S8: np.dtype(np.int8),
    P.S16: np.dtype(np.int16), P.S32: np.dtype(np.int32), P.S64: np.dtype(np.int64),
    P.U4: np.dtype(ml_dtypes.uint4), P.U8: np.dtype(np.uint8), P.U16: np.dtype(np.uint16),
    P.U32: np.dtype(np.uint32), P.U64: np.dtype(np.uint64),
    P.F8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn), P.F8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    P.F16: np.dtype(np.float16), P.BF16: np.dtype(ml_dtypes.bfloat16),
    P.F32: np.dtype(np.float32), P.F64: np.dtype(np.float64),
    P.C64: np.dtype(np.complex64), P.C128: np.dtype(np.complex128),
}
_BY_TEXT = {t.value: t for t in PrimitiveType}
_BY_NUMPY = {dt: t for t, dt in _NUMPY.items()}
