"""TensorFlow DataType enum values <-> HLO element types.

Kept as plain numbers (tensorflow/core/framework/types.proto) so this module
imports without TensorFlow.
"""

from __future__ import annotations

from hlo.dtypes import PrimitiveType as P

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_STRING = 1, 2, 3, 4, 5, 6, 7
DT_COMPLEX64, DT_INT64, DT_BOOL, DT_BFLOAT16, DT_UINT16, DT_COMPLEX128, DT_HALF = 8, 9, 10, 14, 17, 18, 19
DT_RESOURCE, DT_VARIANT, DT_UINT32, DT_UINT64 = 20, 21, 22, 23

_TO_HLO = {
    DT_FLOAT: P.F32, DT_DOUBLE: P.F64, DT_HALF: P.F16, DT_BFLOAT16: P.BF16,
    DT_INT8: P.S8, DT_INT16: P.S16, DT_INT32: P.S32, DT_INT64: P.S64,
    DT_UINT8: P.U8, DT_UINT16: P.U16, DT_UINT32: P.U32, DT_UINT64: P.U64,
    DT_BOOL: P.PRED, DT_COMPLEX64: P.C64, DT_COMPLEX128: P.C128,
}
_TO_TF = {v: k for k, v in _TO_HLO.items()}
_NAMES = {
    DT_FLOAT: "float32", DT_DOUBLE: "float64", DT_HALF: "float16", DT_BFLOAT16: "bfloat16", DT_INT8: "int8",
    DT_INT16: "int16", DT_INT32: "int32", DT_INT64: "int64", DT_UINT8: "uint8", DT_UINT16: "uint16",
    DT_UINT32: "uint32", DT_UINT64: "uint64", DT_BOOL: "bool", DT_COMPLEX64: "complex64",
    DT_COMPLEX128: "complex128", DT_STRING: "string", DT_RESOURCE: "resource", DT_VARIANT: "variant",
}

# The dtype families lowering rules declare support for.
FLOATS = frozenset({P.F16, P.BF16, P.F32, P.F64})
SIGNED_INTS = frozenset({P.S8, P.S16, P.S32, P.S64})
UNSIGNED_INTS = frozenset({P.U8, P.U16, P.U32, P.U64})
INTS = SIGNED_INTS | UNSIGNED_INTS
NUMERIC = FLOATS | INTS
COMPLEX = frozenset({P.C64, P.C128})
# Every element type a tensor can have here: data movement, selects and casts take them all.
ALL = NUMERIC | {P.PRED} | COMPLEX


def to_hlo(dt: int) -> P:
    try:
        return _TO_HLO[int(dt)]
    except KeyError:
        raise TypeError(f"TensorFlow dtype {tf_name(dt)} has no HLO element type") from None


def to_tf(t: P) -> int:
    return _TO_TF[t]


def tf_name(dt: int) -> str:
    return _NAMES.get(int(dt), f"DataType({int(dt)})")


def hlo_tf_name(t: P) -> str:
    """The TF name of an HLO element type (``f32`` -> ``float32``) for error messages."""
    return _NAMES[_TO_TF[t]] if t in _TO_TF else t.value
