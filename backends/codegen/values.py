"""Values of generated code: an instruction's result is one buffer or a (nested) tuple of them.

Generated C addresses an array as a ``Buf`` (a pointer expression and a shape); the CUDA host side
has its own buffer type (a device buffer reference and a shape). Everything else here only needs
leaves to be frozen dataclasses with a ``shape`` field, and tuples to be Python tuples.
``check_array`` is the one test that a shape can have a buffer at all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, TypeVar

from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from hlo.dtypes import PrimitiveType
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape

B = TypeVar("B")


@dataclass(frozen=True)
class Buf:
    """An array as generated C addresses it: a pointer expression (to its storage type) and its shape."""

    ptr: str
    shape: Shape

    def at(self, idx) -> str:
        """The element at multi-index ``idx`` (C expressions), in storage type."""
        return f"{self.ptr}[{linear_index(self.shape, idx)}]"


def leaves(value) -> list:
    """The buffers of a value, depth first (the ABI's order of a tuple's leaves)."""
    if not isinstance(value, tuple):
        return [value]
    out: list = []
    for v in value:
        out.extend(leaves(v))
    return out


def rebuild(shape: ShapeLike, leaf: Callable[[Shape], B]):
    """The value of ``shape`` whose leaves ``leaf(leaf_shape)`` returns, called in leaf order."""
    if isinstance(shape, TupleShape):
        return tuple(rebuild(e, leaf) for e in shape.elements)
    return leaf(shape)


def view(buf: B, shape: Shape) -> B:
    """``buf``'s memory seen as ``shape`` (a bitcast or a row-major reshape)."""
    return dataclasses.replace(buf, shape=shape)  # type: ignore[type-var]


def check_array(shape: ShapeLike, what: str, storage: Callable[[PrimitiveType], str]) -> Shape:
    """``shape`` if it is an array of an element type the backend stores (``storage`` raises
    ``CodegenUnsupported`` for one it does not), else ``CodegenUnsupported`` naming ``what``."""
    if not isinstance(shape, Shape) or not shape.dtype.is_array_type:
        raise CodegenUnsupported(f"{what} must be an array, got {shape}")
    try:
        storage(shape.dtype)
    except CodegenUnsupported as e:
        raise CodegenUnsupported(f"{what}: {e}") from None
    return shape


def direct_results(root: HloInstruction, result):
    """Which instructions write straight into ``result`` (the computation's result buffers): the root,
    or each operand of a root tuple that appears in it once. Others are copied there at the end."""
    if root.opcode is not Opcode.TUPLE:
        return {root.name: result}
    counts = {n: list(root.operands).count(n) for n in root.operands}
    return {name: part for name, part in zip(root.operands, result) if counts[name] == 1}
