"""Shapes and literals as ``xla.ShapeProto`` / ``xla.LiteralProto``.

``ELEMENT_TYPES`` maps our element types to XLA's ``PrimitiveType`` enum (the names agree); ``_LITERAL_FIELDS``
says in which ``LiteralProto`` field, and how, the values of each element type are stored: a repeated
scalar field, little-endian bytes (the 8- and 16-bit types, as XLA writes them) or interleaved
real/imaginary floats (complex).
"""

from __future__ import annotations

import numpy as np
from tensorflow.compiler.xla import xla_data_pb2

from hlo.dtypes import PrimitiveType
from hlo.literal import Literal
from hlo.shapes import Layout, Shape, ShapeLike, TupleShape

ELEMENT_TYPES: dict[PrimitiveType, int] = {t: xla_data_pb2.PrimitiveType.Value(t.name) for t in PrimitiveType}

_P = PrimitiveType
# element type -> (LiteralProto field, storage): "repeated" scalars, "bytes" (little-endian), "complex" pairs
_LITERAL_FIELDS: dict[PrimitiveType, tuple[str, str]] = {
    _P.PRED: ("preds", "repeated"), _P.S32: ("s32s", "repeated"), _P.S64: ("s64s", "repeated"),
    _P.U32: ("u32s", "repeated"), _P.U64: ("u64s", "repeated"), _P.F32: ("f32s", "repeated"),
    _P.F64: ("f64s", "repeated"),
    _P.S4: ("s4s", "bytes"), _P.S8: ("s8s", "bytes"), _P.S16: ("s16s", "bytes"), _P.U4: ("u4s", "bytes"),
    _P.U8: ("u8s", "bytes"), _P.U16: ("u16s", "bytes"), _P.F16: ("f16s", "bytes"), _P.BF16: ("bf16s", "bytes"),
    _P.F8E4M3FN: ("f8e4m3fns", "bytes"), _P.F8E5M2: ("f8e5m2s", "bytes"),
    _P.C64: ("c64s", "complex"), _P.C128: ("c128s", "complex"),
}


class Unrepresentable(ValueError):
    """A value with no faithful proto form (``module.py`` adds where it was)."""


def _layout_proto(layout: Layout) -> xla_data_pb2.LayoutProto:
    if layout.extra:
        raise Unrepresentable(f"layout {layout} carries text we do not interpret ({layout.extra!r})")
    # XLA writes tail_padding_alignment_in_elements=1 in every layout it serializes
    return xla_data_pb2.LayoutProto(minor_to_major=layout.minor_to_major, tail_padding_alignment_in_elements=1)


def shape_proto(shape: ShapeLike) -> xla_data_pb2.ShapeProto:
    """``shape`` as XLA serializes it; an array without a known layout gets none (a scalar gets XLA's
    empty one)."""
    if isinstance(shape, TupleShape):
        return xla_data_pb2.ShapeProto(element_type=xla_data_pb2.TUPLE,
                                       tuple_shapes=[shape_proto(e) for e in shape.elements])
    proto = xla_data_pb2.ShapeProto(element_type=ELEMENT_TYPES[shape.dtype])
    if shape.dtype is PrimitiveType.TOKEN:
        return proto
    proto.dimensions.extend(shape.dims)
    proto.is_dynamic_dimension.extend(shape.dynamic or (False,) * shape.rank)
    layout = shape.layout if shape.rank else Layout(())
    if layout is not None:
        proto.layout.CopyFrom(_layout_proto(layout))
    return proto


def literal_proto(literal: Literal) -> xla_data_pb2.LiteralProto:
    """``literal`` with its values in row-major order (its shape gets the default layout, which that order is)."""
    if literal.elements is not None:
        return xla_data_pb2.LiteralProto(shape=shape_proto(literal.shape),
                                         tuple_literals=[literal_proto(e) for e in literal.elements])
    if literal.array is None:
        raise Unrepresentable("the constant's values were elided ({...}) in the HLO text")
    shape = literal.shape
    assert isinstance(shape, Shape)
    proto = xla_data_pb2.LiteralProto(shape=shape_proto(Shape.array(shape.dtype, shape.dims)))
    field, storage = _LITERAL_FIELDS[shape.dtype]
    flat = np.ascontiguousarray(literal.array).reshape(-1)
    if storage == "bytes":
        setattr(proto, field, flat.astype(flat.dtype.newbyteorder("<")).tobytes())
    elif storage == "complex":
        getattr(proto, field).extend(flat.view(flat.real.dtype).tolist())  # re0, im0, re1, im1, ...
    else:
        getattr(proto, field).extend(flat.tolist())
    return proto


__all__ = ["ELEMENT_TYPES", "Unrepresentable", "literal_proto", "shape_proto"]
