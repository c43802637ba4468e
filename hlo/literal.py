"""Literals: the values of ``constant`` instructions, and their XLA text form.

A ``Literal`` wraps a read-only NumPy array (or a tuple of literals). Equality
is bitwise, so NaN constants compare equal to themselves and ``-0 != 0``.
Large constants in XLA dumps are printed as ``{...}``; such a literal is
``elided``: it has a shape but no data, and evaluating it is an error.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hlo.dtypes import PrimitiveType
from hlo.shapes import Shape, ShapeLike, array_shape


class Literal:
    __slots__ = ("shape", "array", "elements")

    def __init__(self, shape: ShapeLike, array: np.ndarray | None = None,
                 elements: tuple["Literal", ...] | None = None):
        self.shape = shape
        self.elements = elements
        if array is not None:
            arr_shape = array_shape(shape)  # an array value needs an array shape
            array = np.array(array, dtype=arr_shape.dtype.numpy, copy=True).reshape(arr_shape.dims)
            array.setflags(write=False)
        self.array = array

    # --- construction ------------------------------------------------------
    @staticmethod
    def from_array(array, dtype: PrimitiveType | None = None) -> "Literal":
        arr = np.asarray(array)
        dtype = dtype or PrimitiveType.from_numpy(arr.dtype)
        return Literal(Shape.array(dtype, arr.shape), arr.astype(dtype.numpy))

    @staticmethod
    def elided(shape: Shape) -> "Literal":
        return Literal(shape)

    @property
    def is_elided(self) -> bool:
        return self.array is None and self.elements is None

    def to_numpy(self):
        if self.elements is not None:
            return tuple(e.to_numpy() for e in self.elements)
        if self.array is None:
            raise ValueError("literal was elided in the HLO text ({...}); its values are unknown")
        return self.array

    # --- equality ----------------------------------------------------------
    def _key(self):
        if self.elements is not None:
            return ("tuple", tuple(e._key() for e in self.elements))
        data = None if self.array is None else np.ascontiguousarray(self.array).tobytes()
        return (str(self.shape.without_layout()), data)

    def __eq__(self, other) -> bool:
        return isinstance(other, Literal) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Literal({self.shape}, {format_literal(self)})"


def _format_scalar(value, dtype: PrimitiveType) -> str:
    if dtype is PrimitiveType.PRED:
        return "true" if bool(value) else "false"
    if dtype.is_integral:
        return str(int(value))
    if dtype.is_complex:
        return f"({_format_float(value.real)}, {_format_float(value.imag)})"
    return _format_float(value)


# (digits10, max_digits10) per float type: XLA prints the short form when it round-trips.
_DIGITS = {2: (3, 5), 4: (6, 9), 8: (15, 17)}
_BF16_DIGITS = (2, 4)


def _format_float(value) -> str:
    f = float(value)
    if np.isnan(f):
        return "-nan" if np.signbit(f) else "nan"
    if np.isinf(f):
        return "-inf" if f < 0 else "inf"
    dtype = value.dtype if isinstance(value, np.generic) else np.dtype(np.float64)
    short, full = _BF16_DIGITS if dtype == ml_dtypes.bfloat16 else _DIGITS.get(dtype.itemsize, (6, 9))
    text = "%.*g" % (short, f)
    if np.array(float(text), dtype=dtype) != np.array(f, dtype=dtype):
        text = "%.*g" % (full, f)
    return text


def format_literal(lit: Literal) -> str:
    """XLA's text for a literal's value: ``1.5``, ``{1, 2}``, ``{ {1, 2}, {3, 4} }``, ``{...}``."""
    if lit.elements is not None:
        return "(" + ", ".join(format_literal(e) for e in lit.elements) + ")"
    if lit.array is None:
        return "{...}"
    dtype = array_shape(lit.shape).dtype
    arr = lit.array

    if arr.ndim == 0:
        return _format_scalar(arr[()], dtype)
    if arr.ndim == 1:
        return "{" + ", ".join(_format_scalar(v, dtype) for v in arr) + "}"

    def rec(a: np.ndarray) -> str:  # rank >= 2: XLA pads every brace with spaces
        if a.ndim == 1:  # innermost braces are padded only around more than one element
            pad = " " if a.shape[0] > 1 else ""
            return "{" + pad + ", ".join(_format_scalar(v, dtype) for v in a) + pad + "}"
        return "{ " + ", ".join(rec(sub) for sub in a) + " }"

    return rec(arr)
